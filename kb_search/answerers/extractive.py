"""The default answerer, offline and deterministic: the sentences of the top passages likeliest
to hold what the question asks for (kb_search/answerers/sentences.py), quoted verbatim, each
followed by its passage's [n], so what the answer says is what the documents say and
verification passes. A sentence that does not directly follow the one before it in the same
paragraph starts a line of its own, so pieces from different places never run together (and a
list item's marker, 「7.」, never sticks to the [n] before it). Whether the passages hold the
answer is retrieval's decision, made before any answerer is called
(kb_search/answerability.py); this answerer says the not-found sentence only when there is
nothing to quote.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from kb_search.answerers.answer import (
    NOT_FOUND,
    Answer,
    Exchange,
    Passage,
    Tools,
    answer_from_text,
)
from kb_search.answerers.sentences import Sentence, choose_sentences

__all__ = ["ExtractiveAnswerer"]

_SAME_LINE = re.compile(r"[ \t\u3000]*")  # between two sentences of one paragraph


class ExtractiveAnswerer:
    """Quotes the sentences of the top passages that answer the question best."""

    name = "extractive"
    calls_tools = False  # it quotes; it computes nothing

    # It quotes for the question as searched, which already carries the conversation's topic
    # (kb_search/follow_ups.py): the earlier turns add nothing it can use.
    def answer(self, question: str, passages: list[Passage], tools: Tools | None = None,
               earlier: Sequence[Exchange] = ()) -> Answer:
        return self.finish("".join(self.stream(question, passages)))

    def stream(self, question: str, passages: list[Passage], tools: Tools | None = None,
               earlier: Sequence[Exchange] = ()) -> Iterator[str]:
        chosen = choose_sentences(question, passages)
        if not chosen:
            yield NOT_FOUND
            return
        contents = {p.n: p.content for p in passages}
        for before, sentence in zip([None, *chosen], chosen, strict=False):
            separator = "" if before is None or _follows(before, sentence, contents) else "\n"
            yield f"{separator}{sentence.text}[{sentence.n}]"

    def finish(self, text: str) -> Answer:
        return answer_from_text(text, self.name)


def _follows(before: Sentence, sentence: Sentence, contents: dict[int, str]) -> bool:
    """Whether `sentence` is the next one after `before` in the same paragraph of a passage."""
    if sentence.n != before.n or sentence.row or before.row:
        return False
    end, start = before.spans[-1][1], sentence.spans[0][0]
    return end <= start and _SAME_LINE.fullmatch(contents[sentence.n], end, start) is not None
