"""Check a generated answer against the passages it was given.

Rules: every [n] must be a passage that was given; every number and code in a sentence must
appear in a passage that sentence cites; a found answer must cite something. A sentence with no
citation of its own is checked against every passage the answer cites (a citation at the end of
a paragraph often covers the sentences before it). Both sides are NFKC-normalized, so full-width
digits match, and thousands separators are dropped, so 1,200 matches 1200. Codes (ZP-2041,
ISO9001) must appear whole; 第22条 and 3営業日 are checked as the numbers 22 and 3. Kanji numerals
(三日) are not read as numbers.

`supporting_sentences` says which sentences of a cited passage hold what a piece of the answer
says, by the same reading: what a citation quotes (kb_search/quoting.py).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from decimal import Decimal

from kb_search.answerers.answer import CITATION, Answer, Passage, citations
from kb_search.answerers.sentences import Sentence, wording

__all__ = ["supporting_sentences", "verify"]

_DASHES = str.maketrans(dict.fromkeys("‐‑‒–—―−", "-"))
# A sentence ends at 。！？!? or a line break, and keeps the citations written right after it.
_SENTENCE_END = re.compile(
    r"(?:[。!?]+|\n+)(?:[ \t]*\[\s*\d+(?:\s*[,、]\s*\d+)*\s*\])*"
)
_CODE = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]+-?\d+(?:-\d+)*(?![0-9])")
_NUMBER = re.compile(r"(?<![\d.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_SPACE = re.compile(r"\s+")
_QUOTED_WHOLE = 8  # characters a sentence needs before its appearing in a claim counts
_SHARED_WORDING = 1 / 3  # of a claim's wording a sentence must hold to support it by words


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
    # Line breaks stay: a table row's code must not join the number ending the row above
    # (「… | 8」「CAR-141 | …」 is no 「8CAR141」).
    return re.sub(r"[^\S\n]|-", "", text).upper()


def _has_code(passage: str, code: str) -> bool:
    # Hyphens and spaces are dropped on both sides (ZP-2041, ZP2041, ZP 2041 are one code);
    # the digit guards keep ZP-204 from matching inside ZP-2041.
    pattern = rf"(?<![0-9]){re.escape(_compact(code))}(?![0-9])"
    return re.search(pattern, _compact(passage)) is not None


def supporting_sentences(claim: str, sentences: Sequence[Sentence]) -> list[Sentence]:
    """The sentences of one cited passage that hold what `claim` (a piece of an answer before
    its [n]) says, in passage order: those it quotes whole, or one that quotes it; else, for
    each number and code it states, the sentence holding it whose wording it shares most; else
    the sentence whose wording it shares most, if that is a third of its own."""
    said = _squeezed(claim)
    if not said:
        return []
    quoted = [s for s in sentences if _quotes(said, _squeezed(s.text))]
    if quoted:
        return quoted
    words = wording(claim)

    def shared(sentence: Sentence) -> float:
        return len(words & wording(sentence.text)) / (len(words) or 1)

    text = _normalize(claim)
    holders = [[s for s in sentences if _has_code(_normalize(s.text), code)]
               for code in _CODE.findall(text)]
    holders += [[s for s in sentences if _value(number) in _numbers(_normalize(s.text))]
                for number in _NUMBER.findall(_CODE.sub(" ", text))]
    picked = [max(h, key=shared) for h in holders if h]
    if not picked:
        best = max(sentences, key=shared, default=None)
        picked = [best] if best is not None and shared(best) >= _SHARED_WORDING else []
    return [s for s in sentences if any(s is p for p in picked)]


def _quotes(said: str, sentence: str) -> bool:
    """Whether a claim quotes a sentence whole, or the sentence quotes the claim."""
    if sentence == said:
        return True
    return (len(sentence) >= _QUOTED_WHOLE and sentence in said) or (
        len(said) >= _QUOTED_WHOLE and said in sentence)


def _squeezed(text: str) -> str:
    return _SPACE.sub("", _normalize(CITATION.sub(" ", _normalize(text))))
