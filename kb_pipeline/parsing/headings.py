"""Headings that Japanese plain text marks by wording alone: 第N章/節/条, 附則, 1. / (1)."""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from kb_pipeline.parsing.numerals import KANJI_DIGITS

__all__ = ["CAPTION", "HeadingMatch", "match_heading"]

HeadingKind = Literal["chapter", "section", "article", "supplementary", "numbered"]

_NUMBER = rf"(?:[0-9０-９]+|[{KANJI_DIGITS}十百千]+)"
_STRUCTURAL = re.compile(rf"第[ 　]?{_NUMBER}[ 　]?(?P<unit>章|節|条)(?:の{_NUMBER})*")
_UNIT_KIND: dict[str, HeadingKind] = {"章": "chapter", "節": "section", "条": "article"}
_SUPPLEMENTARY = re.compile(r"[附付][ 　]*則(?:[ 　]*[（(][^）)]*[）)])?")
# Section numbers never start with 0, which keeps values such as 「0.8 MPa」 out.
_D = "[1-9１-９][0-9０-９]?"
# 「■ 1. アカウント」「◆ 概要」: a mark before a section heading in plain text.
_MARK = "(?:[■□◆◇●○◎▼▽▶►][ 　]*)?"
_NUMBERED = (
    # "1. 目的", "１．目的" (but not "1.5倍")
    (re.compile(rf"{_MARK}{_D}[.．](?![0-9０-９])[ 　]*(?P<title>\S.*)"), 1),
    # "1.1 適用範囲", "1.1.1 …", "3-1. 分解調査"
    (
        re.compile(
            rf"{_MARK}(?P<number>{_D}(?:[.．\-－]{_D})+)(?:[.．][ 　]*|[ 　]+)(?P<title>\S.*)"
        ),
        0,
    ),
    # "(1) 対象者", "（１）対象者"
    (re.compile(rf"{_MARK}[（(]{_D}[)）][ 　]*(?P<title>\S.*)"), 2),
    # "■ 概要"
    (re.compile(r"[■□◆◇●○◎▼▽▶►][ 　]*(?P<title>\S.*)"), 1),
)
# A short parenthesised line such as 「（目的）」 names the article on the next line.
CAPTION = re.compile(r"[（(][^（）()\s]{1,20}[）)]")
_MAX_TITLE_CHARS = 30
# A numbered heading's title is words (「目的」, "Scope"), not a unit as in 「1.8 kg」「2. MPa」.
_WORDING = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]|[A-Z][a-z]{2,}|[a-z]{4,}")


class HeadingMatch(NamedTuple):
    """A line recognised as a heading: its heading text and the body text that followed on the line.

    `depth` is 1 for 1., 2 for 1.1 or (1) and so on; 0 for structural headings, whose level
    is fixed by kind.
    """

    kind: HeadingKind
    text: str
    body: str
    depth: int = 0

    @property
    def is_bare(self) -> bool:
        """Whether the heading is only 「第N条」, so a caption line before it can name it."""
        return _STRUCTURAL.fullmatch(self.text) is not None


def match_heading(line: str, *, numbered: bool = True) -> HeadingMatch | None:
    """Return the heading `line` starts with, or None if it is ordinary text."""
    line = line.strip()
    structural = _STRUCTURAL.match(line)
    if structural:
        return _structural(line, structural)
    if _SUPPLEMENTARY.fullmatch(line):
        return HeadingMatch("supplementary", line, "")
    return _numbered(line) if numbered else None


def _structural(line: str, match: re.Match[str]) -> HeadingMatch | None:
    kind = _UNIT_KIND[match["unit"]]
    label, rest = line[: match.end()], line[match.end() :]
    if rest[:1] in ("（", "("):
        close = min((i for i in (rest.find("）"), rest.find(")")) if i > 0), default=-1)
        if close < 0:
            return None
        label, rest = label + rest[: close + 1], rest[close + 1 :]
    elif rest and not rest[0].isspace():
        return None  # 「第3条の規定により…」 refers to an article; it does not start one
    rest = rest.strip()
    if kind != "article" or _is_title(rest):
        # 「第1章　総則」: the rest of the line is the heading's title.
        return HeadingMatch(kind, line, "")
    # 「第1条　この規程は…」: the article's text starts on its heading line.
    return HeadingMatch(kind, label, rest)


def _numbered(line: str) -> HeadingMatch | None:
    for pattern, depth in _NUMBERED:
        match = pattern.fullmatch(line)
        if match and _is_title(match["title"]) and _WORDING.search(match["title"]):
            if depth == 0:
                depth = len(re.split(r"[.．\-－]", match["number"]))
            return HeadingMatch("numbered", line, "", depth)
    return None


def _is_title(text: str) -> bool:
    """Short and not a sentence: 「総則」「締め日」, not 「従業員は…する。」."""
    return len(text) <= _MAX_TITLE_CHARS and not any(ch in text for ch in "。、，")
