"""What every answerer shares: the passages it is given, the answer it returns, the [n] notation.

An answer cites passage n as [n] (also [1][2], [1, 2] and full-width ［１］). An answer whose
text is the not-found sentence is not found, whatever citations follow it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence
from typing import Protocol

import msgspec

from kb_core.chat_clients import Tool, ToolCall
from kb_search.passage_reference import PassageRef

__all__ = [
    "NOT_FOUND",
    "Answer",
    "Answerer",
    "AnswererConfigError",
    "Claim",
    "Exchange",
    "Passage",
    "Tools",
    "UnknownAnswererError",
    "answer_from_text",
    "citations",
    "claims",
    "is_not_found",
]

NOT_FOUND = "該当する記載が見つかりませんでした。"

# After NFKC: ［１，２］ has become [1,2].
CITATION = re.compile(r"\[\s*(\d+(?:\s*[,、]\s*\d+)*)\s*\]")
# One or more marks written one after the other: the citations of the text before them.
_MARK_RUN = re.compile(rf"(?:\s*{CITATION.pattern})+")
_TRAILING = re.compile(r"[\s。.]+$")


class Passage(PassageRef, frozen=True):
    """One retrieved chunk offered to an answerer; `n` is its 1-based citation number."""

    n: int
    content: str


class Exchange(msgspec.Struct, frozen=True):
    """An earlier turn of the conversation a question continues: its question, and its
    answer when every passage that answer cited is still the caller's to read (else None: an
    answer may repeat what a passage the caller has lost says)."""

    question: str
    answer: str | None


class Answer(msgspec.Struct):
    """An answer's text, whether it found anything, the [n] it cites and who produced it."""

    text: str
    found: bool
    cited: list[int]  # the [n] numbers the text cites, in first-use order
    answerer: str  # e.g. "extractive", "claude/claude-sonnet-4-5", "extractive (fallback: ...)"


class Claim(msgspec.Struct, frozen=True):
    """A piece of an answer's text (NFKC) and the passages cited right after it."""

    text: str
    cites: list[int]


class Tools(Protocol):
    """Computations an answerer that calls tools may ask for (the tables of the passages'
    documents, kb_search/tables/tools.py): what the prompt says of them, their definitions,
    and a call's result as the model reads it."""

    definitions: list[Tool]

    def described(self) -> str: ...

    def call(self, call: ToolCall) -> str: ...


class Answerer(Protocol):
    """What every answerer offers."""

    name: str
    calls_tools: bool  # whether `tools` given to it are used (an LLM's) or not (extractive)

    def answer(self, question: str, passages: list[Passage], tools: Tools | None = None,
               earlier: Sequence[Exchange] = ()) -> Answer:
        """The answer to `question` from `passages` only (and what `tools` return); `earlier`
        the turns of the conversation it continues, for reading it, never as evidence."""
        ...

    def stream(self, question: str, passages: list[Passage], tools: Tools | None = None,
               earlier: Sequence[Exchange] = ()) -> Iterator[str]:
        """Text deltas as generated; join them and pass the text to `finish`."""
        ...

    def finish(self, text: str) -> Answer:
        """The Answer for a text this answerer generated (found, citations, label)."""
        ...


class AnswererConfigError(ValueError):
    """An answerer cannot be built from the configuration (unknown name, missing key)."""


class UnknownAnswererError(AnswererConfigError):
    pass


def citations(text: str) -> list[int]:
    """The passage numbers `text` cites as [n], distinct, in order of first use."""
    seen: dict[int, None] = {}
    for group in CITATION.finditer(unicodedata.normalize("NFKC", text)):
        for number in re.split(r"\s*[,、]\s*", group.group(1).strip()):
            seen.setdefault(int(number))
    return list(seen)


def claims(text: str) -> list[Claim]:
    """The pieces of `text` that cite, each the text since the previous marks, with the
    passages its marks cite: a sentence the extractive answerer quoted, or what an LLM said
    before citing. Text after the last mark cites nothing and is left out."""
    normalized = unicodedata.normalize("NFKC", text)
    pieces, start = [], 0
    for run in _MARK_RUN.finditer(normalized):
        piece = normalized[start:run.start()].strip()
        start = run.end()
        if piece:
            pieces.append(Claim(text=piece, cites=citations(run.group())))
    return pieces


def is_not_found(text: str) -> bool:
    """Whether `text` says the documents hold no answer.

    True when it opens with the not-found sentence (a model may explain after it), or holds it
    somewhere and cites nothing (「文書には該当する記載が見つかりませんでした。」).
    """
    normalized = unicodedata.normalize("NFKC", text)
    bare = CITATION.sub("", normalized).strip()
    core = _TRAILING.sub("", unicodedata.normalize("NFKC", NOT_FOUND))
    return bare.startswith(core) or (core in bare and not CITATION.search(normalized))


def answer_from_text(text: str, answerer: str) -> Answer:
    """The Answer for a generated text: found unless it is the not-found sentence; its [n]."""
    return Answer(text=text, found=not is_not_found(text), cited=citations(text), answerer=answerer)
