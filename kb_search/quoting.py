"""What a citation shows of its passage: the sentences the answer took from it, exactly as the
passage has them, and the sentence before and after for context.

The sentences are those `supporting_sentences` finds for the pieces of the answer that cite the
passage: the extractive answerer's quoted sentences themselves (a table row with its header),
or for an LLM answer the sentences holding its numbers, codes or wording. When none holds what
the answer says, the passage's best sentences for the question are shown. They come in passage
order; sentences that follow one another are shown together, as the passage writes them, and
"…" stands between those that do not, so every part of a quote is a piece of its passage.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from kb_search.answerers.answer import Passage
from kb_search.answerers.sentences import Sentence, Span, choose_sentences, passage_sentences
from kb_search.answerers.verification import supporting_sentences

__all__ = ["GAP", "Quote", "quote_passage"]

GAP = "…"  # between parts of a quote that do not follow one another in the passage
CONTEXT_CHARS = 120  # of the sentence before or after; a long table row is cut
# A sentence, or a line that ends without one (a table row, a list item without 。).
_PIECE = re.compile(r"[^。！？!?\n]+(?:[。！？!?]+[」』）)]*)?")
_NOT_CONTEXT = re.compile(r"#.*|[|:\-\s]+")  # Markdown headings and table rules


class Quote(msgspec.Struct, frozen=True):
    """The passage's sentences an answer used, and the passage's text either side of them."""

    text: str  # parts of the passage, in its order, GAP between parts not adjacent
    before: str  # the sentence just before the first part ("" at the passage's start)
    after: str  # the sentence just after the last part ("" at its end)


def quote_passage(passage: Passage, claims: Sequence[str], question: str) -> Quote:
    """What a citation of `passage` shows, for the pieces of an answer that cite it (`claims`,
    as `contract.claims` reads them) and the question asked."""
    sentences = passage_sentences(passage)
    used = [s for claim in claims for s in supporting_sentences(claim, sentences)]
    # Nothing the answer says is in a sentence of it: what in it answers the question.
    used = used or choose_sentences(question, [passage]) or sentences[:1]
    if not used:  # a passage without a sentence: a heading, a fragment
        return Quote(text=_clipped_after(passage.content.strip()), before="", after="")
    return _quote(passage.content, _spans(used))


def _spans(sentences: Sequence[Sentence]) -> list[Span]:
    """The places of `sentences` in their passage, in order, each once (two rows of a table
    share their header)."""
    return sorted({span for sentence in sentences for span in sentence.spans})


def _quote(content: str, spans: list[Span]) -> Quote:
    """The parts of `content` at `spans`, those with only white space between made one."""
    parts: list[list[int]] = []
    for start, end in spans:
        if parts and not content[parts[-1][1]:start].strip():
            parts[-1][1] = max(parts[-1][1], end)
        else:
            parts.append([start, end])
    return Quote(text=GAP.join(content[start:end] for start, end in parts),
                 before=_clipped_before(_last_piece(content[:parts[0][0]])),
                 after=_clipped_after(_first_piece(content[parts[-1][1]:])))


def _context(text: str) -> list[str]:
    pieces = (piece.strip() for piece in _PIECE.findall(text))
    return [piece for piece in pieces if piece and not _NOT_CONTEXT.fullmatch(piece)]


def _last_piece(text: str) -> str:
    pieces = _context(text)
    return pieces[-1] if pieces else ""


def _first_piece(text: str) -> str:
    pieces = _context(text)
    return pieces[0] if pieces else ""


def _clipped_before(text: str) -> str:
    return text if len(text) <= CONTEXT_CHARS else GAP + text[-CONTEXT_CHARS:].lstrip()


def _clipped_after(text: str) -> str:
    return text if len(text) <= CONTEXT_CHARS else text[:CONTEXT_CHARS].rstrip() + GAP
