"""Check a generated answer against the passages it was given.

Rules: every [n] must be a passage that was given; every number and code in a sentence must
appear in a passage that sentence cites; a found answer must cite something. A sentence with no
citation of its own is checked against every passage the answer cites (a citation at the end of
a paragraph often covers the sentences before it). Both sides are NFKC-normalized, so full-width
digits match, and thousands separators are dropped, so 1,200 matches 1200. Codes (ZP-2041,
ISO9001) must appear whole; 第22条 and 3営業日 are checked as the numbers 22 and 3. Kanji numerals
(三日) are not read as numbers.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal

from kb_search.answerers.contract import CITATION, Answer, Passage, citations

__all__ = ["verify"]

_DASHES = str.maketrans(dict.fromkeys("‐‑‒–—―−", "-"))
# A sentence ends at 。！？!? or a line break, and keeps the citations written right after it.
_SENTENCE_END = re.compile(
    r"(?:[。!?]+|\n+)(?:[ \t]*\[\s*\d+(?:\s*[,、]\s*\d+)*\s*\])*"
)
_CODE = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]+-?\d+(?:-\d+)*(?![0-9])")
_NUMBER = re.compile(r"(?<![\d.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def verify(answer: Answer, passages: list[Passage]) -> tuple[bool, list[str]]:
    """(verified, warnings): verified when nothing in the answer lacks support in its sources."""
    given = {p.n: _normalize(" ".join([p.title, p.heading, p.page or "", p.content]))
             for p in passages}
    text = _normalize(answer.text)
    warnings = [f"citation [{n}] points at no passage" for n in citations(text) if n not in given]
    everything_cited = [n for n in citations(text) if n in given]
    if answer.found and not citations(text):
        warnings.append("the answer cites no passage")
    for sentence in _sentences(text):
        own = [n for n in citations(sentence) if n in given]
        sources = own if citations(sentence) else everything_cited
        warnings.extend(_unsupported(CITATION.sub(" ", sentence), sources, given))
    warnings = list(dict.fromkeys(warnings))
    return not warnings, warnings


def _unsupported(sentence: str, sources: list[int], given: dict[int, str]) -> list[str]:
    """Warnings for the codes and numbers of `sentence` that none of `sources` contains."""
    refs = "".join(f"[{n}]" for n in sources)
    where = f"cited passage {refs}" if len(sources) == 1 else f"cited passages {refs}"
    if not sources:
        where = "any cited passage"
    warnings = []
    for code in _CODE.findall(sentence):
        if not any(_has_code(given[n], code) for n in sources):
            warnings.append(f"code {code} does not appear in {where}")
    for number in _NUMBER.findall(_CODE.sub(" ", sentence)):
        if not any(_value(number) in _numbers(given[n]) for n in sources):
            warnings.append(f"number {number} does not appear in {where}")
    return warnings


def _normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).translate(_DASHES)


def _sentences(text: str) -> list[str]:
    pieces, start = [], 0
    for end in _SENTENCE_END.finditer(text):
        pieces.append(text[start:end.end()])
        start = end.end()
    pieces.append(text[start:])
    return [p for p in pieces if p.strip()]


def _value(number: str) -> Decimal:
    return Decimal(number.replace(",", ""))


def _numbers(text: str) -> set[Decimal]:
    # Read both as the answer is read (codes taken out first: VPN1,000 leaves ",000") and as
    # written, so that a sentence quoted verbatim always finds its own numbers.
    found = _NUMBER.findall(text) + _NUMBER.findall(_CODE.sub(" ", text))
    return {_value(n) for n in found}


def _compact(text: str) -> str:
    return re.sub(r"[\s-]", "", text).upper()


def _has_code(passage: str, code: str) -> bool:
    # Hyphens and spaces are dropped on both sides (ZP-2041, ZP2041, ZP 2041 are one code);
    # the digit guards keep ZP-204 from matching inside ZP-2041.
    pattern = rf"(?<![0-9]){re.escape(_compact(code))}(?![0-9])"
    return re.search(pattern, _compact(passage)) is not None
