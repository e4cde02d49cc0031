"""The comparison a multi-part answer states when its parts' quoted values compare.

「育児休業と介護休業では申請期限はどう違う？」 answered part by part quotes each part's
sentences; when each part quotes exactly one value in a unit both share (30日 and 14日; 5,000円
and 3,000円; the years 1865年 and 1876年), the answer also says which is larger, with the two
values cited where they were quoted. Anything less certain is not stated: values in different
units (1か月 against 2週間), a part quoting two values of the unit, a value its cited passage does
not hold, a value in a sentence that says nothing of what was asked (育児休業's 28日 of 産後パパ育休
and 介護休業's 93日 of leave are no application deadlines) or does not name its item. A wrong
comparison costs more trust than a missing one.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from decimal import Decimal

import msgspec

from kb_core.keywords import CONTENT_RUN, bigrams

__all__ = ["Comparison", "PartValues", "compare", "quoted_values"]

# A number and its unit; 10月1日 is a date (its 1日 no duration) and 第8条 no quantity.
_VALUE = re.compile(r"(?<![\d.,月])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s*"
                    r"(万円|円|営業日|日|週間|か月|ヶ月|カ月|ヵ月|箇月|時間|分|年|人|名|件|回|%|歳|泊)"
                    r"(?!\d)")
_SAME_UNIT = {"ヶ月": "か月", "カ月": "か月", "ヵ月": "か月", "箇月": "か月", "名": "人"}
_CITATION = re.compile(r"\[(\d+)\]")
# What "larger" means for each kind of quantity.
_LARGER = {"円": "高い", "万円": "高い", "%": "高い", "歳": "高い",
           "人": "多い", "件": "多い", "回": "多い"}
_YEAR_FROM = 1000  # 年 with a value this large is a year, not a number of years


class Comparison(msgspec.Struct):
    """What a multi-part answer states about its parts' values, and the values, in part order."""

    text: str
    values: list[str]


class PartValues(msgspec.Struct, frozen=True):
    """A part's label, what it asks of its item (the sub-question without the label), its
    answer's text (with its [n]), and the passages it cites, by n."""

    label: str
    asked: str
    text: str
    passages: dict[int, str]


Quoted = tuple[Decimal, str, int | None, str]


def quoted_values(text: str) -> dict[str, list[Quoted]]:
    """The values a part's answer quotes, by unit: (value, as written, the [n] after it, the
    sentence it is in)."""
    normalized = unicodedata.normalize("NFKC", text)
    found: dict[str, list[Quoted]] = {}
    for match in _VALUE.finditer(normalized):
        unit = _SAME_UNIT.get(match.group(2), match.group(2))
        value = Decimal(match.group(1).replace(",", ""))
        if unit == "年" and value >= _YEAR_FROM:
            unit = "年(西暦)"
        cited = _CITATION.search(normalized, match.end())
        start = max(normalized.rfind(end, 0, match.start()) for end in ("。", "\n", "]")) + 1
        if "|" in normalized[start : match.start()]:  # a table row reads under its header
            start = normalized.rfind("\n", 0, max(start - 1, 0)) + 1
        sentence = normalized[start : cited.start() if cited else len(normalized)]
        found.setdefault(unit, []).append(
            (value, match.group(0), int(cited.group(1)) if cited else None, sentence))
    return found


def compare(parts: Sequence[PartValues]) -> tuple[Comparison, str] | None:
    """The comparison of the parts' values, and the answer's line stating it with each value
    cited, when exactly one unit gives each part exactly one value that its cited passage
    holds; None otherwise."""
    per_part = [quoted_values(p.text) for p in parts]
    # 18か月または8,000時間 against 24か月または10,000時間: which of the two units was asked for
    # is not known, so neither is compared.
    shared = [u for u in per_part[0] if all(u in values for values in per_part)]
    if len(shared) != 1 or any(len({v for v, _, _, _ in values[shared[0]]}) != 1
                               for values in per_part):
        return None
    unit = shared[0]
    chosen = [values[unit][0] for values in per_part]
    for part, (_, written, n, sentence) in zip(parts, chosen, strict=True):
        if (n is None or not _holds(part.passages.get(n, ""), written)
                or not _speaks_of(sentence, part.asked) or not _names(sentence, part.label)):
            return None
    stated = ["、".join(f"{p.label}は{written}{mark}"
                        for p, (_, written, n, _) in zip(parts, chosen, strict=True)
                        for mark in [f"[{n}]" if cite else ""])
              for cite in (False, True)]
    amounts = [value for value, _, _, _ in chosen]
    if len(set(amounts)) == 1:
        relation = "同じです"
    else:
        top = parts[amounts.index(max(amounts) if unit != "年(西暦)" else min(amounts))].label
        word = "早い" if unit == "年(西暦)" else _LARGER.get(unit, "長い")
        relation = (f"{top}の方が{word}です" if len(parts) == 2
                    else f"最も{word}のは{top}です")
    return (Comparison(text=f"{stated[0]}で、{relation}。",
                       values=[written for _, written, _, _ in chosen]),
            f"比較：{stated[1]}で、{relation}。")


def _speaks_of(sentence: str, asked: str) -> bool:
    """Whether the sentence holding a value shares a word (a 2-gram of kanji or katakana) with
    what was asked of the item: the value is then the one asked for, not another of its
    numbers."""
    wanted = {g for run in CONTENT_RUN.findall(unicodedata.normalize("NFKC", asked))
              for g in bigrams(run)}
    return any(g in sentence for g in wanted)


def _names(sentence: str, label: str) -> bool:
    """Whether the sentence holding a value names the item it is compared for (従業員の1か月 is
    not 課長's): the label, without a note in parentheses, case and width aside."""
    item = re.sub(r"\(.*?\)", "", unicodedata.normalize("NFKC", label)).casefold()
    return item in sentence.casefold()


def _holds(passage: str, written: str) -> bool:
    """Whether the passage holds the value as quoted (NFKC, thousands separators and spaces
    aside)."""
    def bare(text: str) -> str:
        return re.sub(r"[\s,]", "", unicodedata.normalize("NFKC", text))

    return bare(written) in bare(passage)
