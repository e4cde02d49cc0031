"""The revision date a document states about itself (改定日, 施行日, 制定日 …)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

from kb_pipeline.parsing.numerals import KANJI_DIGITS, parse_number

__all__ = ["find_revision_date"]

_N = rf"(?:[0-9０-９]{{1,4}}|[{KANJI_DIGITS}十]{{1,4}})"
_SEP = r"[/／\-－.．]"
_DATE = re.compile(
    rf"(?P<year>[0-9０-９]{{4}}|[{KANJI_DIGITS}]{{4}})\s*年\s*(?P<month>{_N})\s*月\s*(?P<day>{_N})\s*日"
    rf"|(?P<year2>[0-9０-９]{{4}}){_SEP}(?P<month2>[0-9０-９]{{1,2}}){_SEP}(?P<day2>[0-9０-９]{{1,2}})"
    rf"|(?P<era>令和|平成|昭和)\s*(?P<eyear>元|{_N})\s*年\s*(?P<emonth>{_N})\s*月\s*(?P<eday>{_N})\s*日"
    rf"|(?P<abbr>[RHSＲＨＳ])\s*(?P<ayear>[0-9０-９]{{1,2}}){_SEP}(?P<amonth>[0-9０-９]{{1,2}})"
    rf"{_SEP}(?P<aday>[0-9０-９]{{1,2}})"
)
_LABEL = r"(?P<label>最終改定|最終改訂|最終更新|改定|改訂|改正|更新(?=日)|施行|制定|発行(?=日))"
# "改定日：2025年10月1日", "施行日（予定） 2025/10/01", "改定日 | 2025-10-01"
_LABEL_THEN_DATE = re.compile(
    _LABEL + r"日?(?:[（(][^）)\n]{0,20}[）)])?[ \t　:：|＝=]*(?:は[ \t　]*)?"
)
# "令和6年4月1日から施行する", "2024/04/01 | 改定"; never across a line end, where a
# date labelled 作成日 would otherwise take the label of the next line.
_DATE_THEN_LABEL = re.compile(r"[ \t　|]*(?:(?:から|より)[ \t　]*)?" + _LABEL)
_ERA_START = {"令和": 2018, "平成": 1988, "昭和": 1925, "R": 2018, "H": 1988, "S": 1925}
_FULL_WIDTH_LETTERS = str.maketrans("ＲＨＳ", "RHS")
# Revisions outrank enforcement, which outranks enactment (制定) and issue (発行).
_RANK = {
    **dict.fromkeys(("最終改定", "最終改訂", "最終更新", "改定", "改訂", "改正", "更新"), 3),
    "施行": 2,
    **dict.fromkeys(("制定", "発行"), 1),
}


def find_revision_date(text: str) -> dt.date | None:
    """Return the latest 改定/改訂 date the text states, else its 施行 date, else its 制定 date."""
    found: dict[int, dt.date] = {}
    for label, date in _labelled_dates(text):
        rank = _RANK[label]
        if rank not in found or date > found[rank]:
            found[rank] = date
    return found[max(found)] if found else None


def _labelled_dates(text: str) -> Iterator[tuple[str, dt.date]]:
    labelled_starts = set()
    for label_match in _LABEL_THEN_DATE.finditer(text):
        date_match = _DATE.match(text, label_match.end())
        date = _to_date(date_match) if date_match else None
        if date is not None:
            labelled_starts.add(date_match.start())
            yield label_match["label"], date
    for date_match in _DATE.finditer(text):
        if date_match.start() in labelled_starts:
            continue  # "制定日 2020/4/1 改定日 …": the date already has its label
        label_match = _DATE_THEN_LABEL.match(text, date_match.end())
        date = _to_date(date_match) if label_match else None
        if date is not None:
            yield label_match["label"], date


def _to_date(match: re.Match[str]) -> dt.date | None:
    try:
        if match["year"]:
            year, month, day = match["year"], match["month"], match["day"]
            return dt.date(parse_number(year), parse_number(month), parse_number(day))
        if match["year2"]:
            year, month, day = match["year2"], match["month2"], match["day2"]
            return dt.date(parse_number(year), parse_number(month), parse_number(day))
        if match["era"]:
            era_year = 1 if match["eyear"] == "元" else parse_number(match["eyear"])
            year = _ERA_START[match["era"]] + era_year
            return dt.date(year, parse_number(match["emonth"]), parse_number(match["eday"]))
        era = match["abbr"].translate(_FULL_WIDTH_LETTERS)
        year = _ERA_START[era] + parse_number(match["ayear"])
        return dt.date(year, parse_number(match["amonth"]), parse_number(match["aday"]))
    except ValueError:
        return None  # 2025年13月1日 and other impossible dates are not dates
