"""Deep mode: a question with several parts answered part by part.

Each part (kb_search/question_parts.py) was retrieved and judged on its own, under the caller's
groups (`GroundedAnswers.retrieve`). Here their passages become one list numbered across the whole
answer, so the answer's citations, their quotes and verification work as for any answer
(`GroundedAnswers.finish`):
- extractive (the default): for each part with evidence, the sentences that carry its fact
  (at most three, each cited), under a label naming the part; a part without evidence, or not
  reached within the time budget, says so in a line of its own; when the parts' quoted values
  compare (kb_search/comparison.py), the comparison last;
- an LLM answerer: one synthesis over the first passages of every part with evidence, the
  not-found lines after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import msgspec

from kb_search.answerers import NOT_FOUND, Answer, Answerer, Passage, answer_with_fallback
from kb_search.answerers.answer import citations, is_not_found
from kb_search.answerers.extractive import ExtractiveAnswerer
from kb_search.answerers.fallback import stream_with_fallback
from kb_search.answerers.numbering import CitationNumber
from kb_search.comparison import Comparison, PartValues, compare
from kb_search.grounded_answers import PASSAGES, AnswerPart, KnownAnswer, PreparedAnswer
from kb_search.question_parts import QuestionPart, QuestionSplit
from kb_search.search import SearchResult

__all__ = ["PartsAnswer", "PartsStream", "answer_parts", "combine", "confirmed", "part_citations",
           "passages_per_part"]

log = logging.getLogger(__name__)

SYNTHESIS_PASSAGES = 3  # of each part, offered to an LLM writing one answer over all parts


@dataclass
class PartsAnswer:
    """The parts' retrieval as one answer's: every part's passages under one numbering."""

    prepared: PreparedAnswer  # what `GroundedAnswers.finish` verifies and quotes the answer against
    split: QuestionSplit
    retrieved: list[PreparedAnswer | None]  # by part; None when not reached in time
    numbers: list[list[int]]  # by part, the numbers its passages are offered under


def combine(question: str, split: QuestionSplit, retrieved: list[PreparedAnswer | None],
            started: float, per_part: int) -> PartsAnswer:
    """The first `per_part` passages of each part, numbered 1, 2, ... across the whole answer
    (a passage two parts found, once)."""
    by_chunk: dict[int, int] = {}
    passages: list[Passage] = []
    hits = []
    numbers: list[list[int]] = []
    for prepared in retrieved:
        own: list[int] = []
        for passage, hit in zip(prepared.passages[:per_part] if prepared else [],
                                prepared.search.hits[:per_part] if prepared else [],
                                strict=True):
            if passage.chunk_id not in by_chunk:
                by_chunk[passage.chunk_id] = len(passages) + 1
                passages.append(msgspec.structs.replace(passage, n=by_chunk[passage.chunk_id]))
                hits.append(msgspec.structs.replace(hit, rank=by_chunk[passage.chunk_id]))
            own.append(by_chunk[passage.chunk_id])
        numbers.append(own)
    found = [p for p in retrieved if p is not None and p.evidence_found]
    took = sum(p.search.took_ms for p in retrieved if p is not None)
    whole = PreparedAnswer(
        search=SearchResult(query=question, took_ms=took, hits=hits), passages=passages,
        evidence_found=bool(found), reason=None if found else "no part has evidence",
        started=started, answerability=max((p.answerability for p in found), default=0.0),
        question=question)
    return PartsAnswer(whole, split, retrieved, numbers)


def confirmed(retrieved: Sequence[PreparedAnswer | None]) -> bool:
    """Whether a tentative split held: every part found evidence, each in a document of its
    own (two halves of one question find the same document, or nothing for the half that
    only goes on the other's topic)."""
    firsts = [p.passages[0].path if p and p.evidence_found and p.passages else None
              for p in retrieved]
    return None not in firsts and len(set(firsts)) == len(firsts)


class PartsStream:
    """An answer written part by part: iterate for its pieces, then `result()`. Knows which
    passages it cites for each part (by their offered numbers; None: by whose they are) and the
    comparison it states."""

    def __init__(self, pieces: Iterator[str], finish: Callable[[str], Answer],
                 part_cites: list[list[int]] | None = None,
                 comparison: Comparison | None = None) -> None:
        self._pieces = pieces
        self._finish = finish
        self._text: list[str] | None = None
        self.part_cites = part_cites
        self.comparison = comparison

    def __iter__(self) -> Iterator[str]:
        self._text = []
        for piece in self._pieces:
            self._text.append(piece)
            yield piece

    def result(self) -> Answer:
        if self._text is None:
            raise RuntimeError("the answer is not finished: iterate over its pieces first")
        return self._finish("".join(self._text))


def passages_per_part(answerer: Answerer) -> int:
    """How many of each part's passages the answer is written from: the extractive answerer
    quotes from as many as for a single question, an LLM reads the first few of every part."""
    return PASSAGES if isinstance(answerer, ExtractiveAnswerer) else SYNTHESIS_PASSAGES


def answer_parts(answerer: Answerer, parts: PartsAnswer, *, streamed: bool) -> PartsStream:
    """The answer's text, in pieces: part by part (extractive) or one synthesis (an LLM, asked
    for a stream when the reader gets one)."""
    if isinstance(answerer, ExtractiveAnswerer):
        return _quoted_parts(answerer, parts)
    return _synthesis(answerer, parts, streamed)


def _part_passages(parts: PartsAnswer, index: int) -> list[Passage]:
    by_n = {p.n: p for p in parts.prepared.passages}
    return [by_n[n] for n in parts.numbers[index]]


def _quoted_parts(answerer: ExtractiveAnswerer, parts: PartsAnswer) -> PartsStream:
    texts: list[str | None] = []
    for i, (part, prepared) in enumerate(zip(parts.split.parts, parts.retrieved, strict=True)):
        text = None
        if prepared is not None and prepared.evidence_found:
            answer = answer_with_fallback(answerer, part.question, _part_passages(parts, i),
                                          log)
            text = None if is_not_found(answer.text) else answer.text
        texts.append(text)
    compared = _comparison(parts, texts)

    def pieces() -> Iterator[str]:
        if not any(texts):
            yield NOT_FOUND
            return
        for i, (part, text) in enumerate(zip(parts.split.parts, texts, strict=True)):
            gap = "\n\n" if i else ""
            yield (f"{gap}【{part.label}】\n{text}" if text
                   else f"{gap}{_missing(parts.split, part, parts.retrieved[i] is not None)}")
        if compared:
            yield f"\n\n{compared[1]}"

    return PartsStream(pieces(), answerer.finish, [citations(t or "") for t in texts],
                       compared[0] if compared else None)


def _synthesis(answerer: Answerer, parts: PartsAnswer, streamed: bool) -> PartsStream:
    found = [i for i, p in enumerate(parts.retrieved) if p is not None and p.evidence_found]
    passages = list({p.n: p for i in found for p in _part_passages(parts, i)}.values())
    question = parts.prepared.question
    earlier = parts.prepared.earlier
    written = (stream_with_fallback(answerer, question, passages, log, earlier=earlier)
               if streamed else KnownAnswer(answer_with_fallback(answerer, question, passages,
                                                                 log, earlier=earlier)))
    missing = [_missing(parts.split, part, parts.retrieved[i] is not None)
               for i, part in enumerate(parts.split.parts) if i not in found]

    def pieces() -> Iterator[str]:
        yield from written
        for line in missing:
            yield f"\n\n{line}"

    def finish(text: str) -> Answer:
        generated = written.result()
        return Answer(text=text, found=generated.found, cited=citations(text),
                      answerer=generated.answerer)

    return PartsStream(pieces(), finish)


def _missing(split: QuestionSplit, part: QuestionPart, searched: bool) -> str:
    """The line saying a part has no answer: an item by its name, a question quoted."""
    name = part.label if split.kind == "items" else f"「{part.label}」"
    if not searched:
        return f"{name}については時間内に調べきれませんでした。"
    return f"{name}については{NOT_FOUND}"


def _comparison(parts: PartsAnswer, texts: list[str | None]) -> tuple[Comparison, str] | None:
    """The comparison of items the question compares, when every part was answered."""
    if not parts.split.compares or not all(texts):
        return None
    contents = {p.n: p.content for p in parts.prepared.passages}
    return compare([PartValues(part.label, part.question.replace(part.label, ""), text or "",
                               contents)
                    for part, text in zip(parts.split.parts, texts, strict=True)])


def part_citations(parts: PartsAnswer, stream: PartsStream,
                   numbers: list[CitationNumber]) -> list[AnswerPart]:
    """Each part, with the reader's [n] of the passages the answer cites for it."""
    reader = {c.passage: c.n for c in numbers}
    out = []
    for i, (part, prepared) in enumerate(zip(parts.split.parts, parts.retrieved, strict=True)):
        own = stream.part_cites[i] if stream.part_cites is not None else parts.numbers[i]
        cited = sorted({reader[n] for n in own if n in reader})
        found = bool(prepared and prepared.evidence_found and cited)
        out.append(AnswerPart(question=part.question, label=part.label, found=found,
                              citations=cited if found else [],
                              searched=prepared is not None))
    return out
