"""The default answerer, offline and deterministic: the sentences of the top passages likeliest
to hold what the question asks for (kb_search/answerers/sentences.py), quoted verbatim, each
followed by its passage's [n], so what the answer says is what the documents say and
verification passes. Whether the passages hold the answer is retrieval's decision, made before
any answerer is called (kb_search/answerability.py); this answerer says the not-found sentence
only when there is nothing to quote.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from kb_search.answerers.contract import NOT_FOUND, Answer, Passage, answer_from_text
from kb_search.answerers.sentences import choose_sentences

__all__ = ["ExtractiveAnswerer"]

_ENDS_SENTENCE = re.compile(r"[。！？!?」』）)]$")


class ExtractiveAnswerer:
    """Quotes the sentences of the top passages that answer the question best."""

    name = "extractive"

    def answer(self, question: str, passages: list[Passage]) -> Answer:
        return self.finish("".join(self.stream(question, passages)))

    def stream(self, question: str, passages: list[Passage]) -> Iterator[str]:
        chosen = choose_sentences(question, passages)
        if not chosen:
            yield NOT_FOUND
            return
        for i, sentence in enumerate(chosen):
            last = i == len(chosen) - 1
            separator = "" if last or _ENDS_SENTENCE.search(sentence.text) else "\n"
            yield f"{sentence.text}[{sentence.n}]{separator}"

    def finish(self, text: str) -> Answer:
        return answer_from_text(text, self.name)
