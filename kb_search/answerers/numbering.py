"""Citation numbers as the reader meets them. An answerer cites the passages by the numbers they
were given in (their retrieval rank), so an answer could cite [3] before [1] and never [2]; the
reader sees [1], [2], ... in the order each passage is first cited.

One renumberer serves a whole text and a stream of deltas alike, so what is streamed is exactly
what the final answer says: it maps each passage number to the next reader's number at its first
use, holding back a mark cut in two by a delta boundary (`…[1` then `2]`). Every mark is written
`[n]`, one per passage (`[1, 2]` and `［１］` become `[1][2]` and `[1]`). A number that points at no
passage offered is kept as written, for verification to name: passages are numbered 1..P, and the
reader's numbers stay within 1..P, so it never collides with one of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Protocol

import msgspec

from kb_search.answerers.answer import Answer

__all__ = ["AnswerDelta", "AnswerStream", "CitationNumber", "CitationNumbers",
           "NumberedStream", "renumber"]

# A mark as an answerer writes it, before any normalization: [1], [1, 2], [1、2], ［１，２］.
_MARK = re.compile(r"[\[［]\s*(\d+(?:\s*[,、，]\s*\d+)*)\s*[\]］]")
_NUMBER_SEPARATOR = re.compile(r"\s*[,、，]\s*")
# An opened mark at the end of a delta, which the next delta may close.
_OPEN_MARK = re.compile(r"[\[［][\s\d,、，]*$")
_LONGEST_MARK = 40  # held back longer than this, an opened bracket is text, not a mark


class CitationNumber(msgspec.Struct, frozen=True):
    """The number a reader sees for a cited passage, and the passage's own number."""

    n: int  # 1, 2, ... in the order the answer first cites each passage
    passage: int  # the number the passage was offered under (its retrieval rank)


class CitationNumbers:
    """Renumbers the [n] marks of one answer's text, fed whole or in deltas, in order of first
    use; `numbers` says which passage each reader's number stands for."""

    def __init__(self, offered: Iterable[int]) -> None:
        self._offered = set(offered)
        self._shown: dict[int, int] = {}  # passage number -> reader's number
        self._held = ""
        self._told = 0  # how many numbers `new` has returned

    @property
    def numbers(self) -> list[CitationNumber]:
        """The passages cited so far, in the reader's order."""
        return [CitationNumber(n=n, passage=p) for p, n in self._shown.items()]

    def new(self) -> list[CitationNumber]:
        """The numbers first used since the last call."""
        fresh = self.numbers[self._told:]
        self._told += len(fresh)
        return fresh

    def feed(self, delta: str) -> str:
        """The renumbered text of `delta` that can be shown now; an opened mark at its end is
        held back until the next delta (or `flush`) closes it or shows it is no mark."""
        text = self._held + delta
        opened = _OPEN_MARK.search(text)
        cut = (opened.start() if opened and len(text) - opened.start() <= _LONGEST_MARK
               else len(text))
        self._held = text[cut:]
        return self._renumbered(text[:cut])

    def flush(self) -> str:
        """What is still held back, renumbered: the text has ended."""
        text, self._held = self._held, ""
        return self._renumbered(text)

    def _renumbered(self, text: str) -> str:
        return _MARK.sub(self._mark, text)

    def _mark(self, found: re.Match[str]) -> str:
        passages = _NUMBER_SEPARATOR.split(found.group(1).strip())
        return "".join(f"[{self._number(int(p))}]" for p in passages)

    def _number(self, passage: int) -> int:
        if passage not in self._offered:
            return passage  # points at nothing: verification says so, in these words
        return self._shown.setdefault(passage, len(self._shown) + 1)


def renumber(text: str, offered: Iterable[int]) -> tuple[str, list[CitationNumber]]:
    """`text` with its citations numbered in order of first use, and what each number stands
    for."""
    numbers = CitationNumbers(offered)
    renumbered = numbers.feed(text) + numbers.flush()
    return renumbered, numbers.numbers


class AnswerDelta(msgspec.Struct):
    """A piece of a streamed answer, its citations renumbered, and the numbers it cites for
    the first time (what each stands for)."""

    text: str
    cited: list[CitationNumber]


class AnswerStream(Protocol):
    """Text deltas as generated, then the final Answer."""

    def __iter__(self) -> Iterator[str]: ...

    def result(self) -> Answer: ...


class NumberedStream:
    """An answer stream whose deltas carry the reader's citation numbers; `result()` is the
    answer as generated, which `renumber` turns into the same text."""

    def __init__(self, stream: AnswerStream, offered: Iterable[int]) -> None:
        self._stream = stream
        self._offered = list(offered)

    def __iter__(self) -> Iterator[AnswerDelta]:
        numbers = CitationNumbers(self._offered)
        for delta in self._stream:
            if text := numbers.feed(delta):  # nothing while a mark is held back whole
                yield AnswerDelta(text=text, cited=numbers.new())
        if text := numbers.flush():
            yield AnswerDelta(text=text, cited=numbers.new())

    def result(self) -> Answer:
        return self._stream.result()
