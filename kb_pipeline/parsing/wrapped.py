"""Lines a page layout wrapped mid-sentence, joined back: a PDF's text layer and OCR's lines."""

from __future__ import annotations

import re
from collections.abc import Sequence

from kb_pipeline.parsing.cjk import SENTENCE_ENDINGS, display_width, is_cjk
from kb_pipeline.parsing.headings import CAPTION, match_heading

__all__ = ["join_wrapped_lines"]

# A line this much narrower than the page's full lines ended early: it was not wrapped.
_FULL_LINE_SHARE = 0.8
# Lines shorter than this (in half-width cells: 10 kanji) are titles or cells, not wrapped text.
_MIN_WRAPPED_WIDTH = 20
_LIST_ITEM = re.compile(r"[・●○■□◆◇▪•※\-–—*]|[0-9０-９]+[ 　]|[①-⑳]")


def join_wrapped_lines(lines: Sequence[str]) -> list[str]:
    """Return `lines` with the lines the layout wrapped mid-sentence joined to the line before.

    Inside Japanese text the join adds nothing (「…精算す」+「る。」→「…精算する。」); between
    Latin words it adds a space. Blank lines stay, as paragraph breaks.
    """
    widths = sorted(display_width(line) for line in lines if line.strip())
    full_width = widths[round(0.9 * (len(widths) - 1))] if widths else 0
    joined: list[str] = []
    previous = ""  # the previous physical line, not the joined line
    for raw in lines:
        line = raw.strip()
        if joined and previous and line and _continues(previous, line, full_width):
            joined[-1] += _separator(previous, line) + line
        else:
            joined.append(line)
        previous = line
    return joined


def _continues(previous: str, line: str, full_width: int) -> bool:
    """Whether `line` carries on the sentence `previous` was cut from."""
    if " | " in previous or " | " in line:  # a table's row (render_row) stands alone
        return False
    width = display_width(previous)
    if width < _MIN_WRAPPED_WIDTH or width < _FULL_LINE_SHARE * full_width:
        return False
    if previous[-1] in SENTENCE_ENDINGS or _LIST_ITEM.match(line) or CAPTION.fullmatch(line):
        return False
    if match_heading(line) is not None:
        return False
    heading = match_heading(previous)
    if heading is not None and not heading.body:
        return False
    last, first = previous[-1], line[0]
    if is_cjk(last) or is_cjk(first):
        return True
    return (last.isalnum() or last in ",;:-)") and (first.isalnum() or first in "(\"'")


def _separator(previous: str, line: str) -> str:
    if is_cjk(previous[-1]) or is_cjk(line[0]):
        return ""
    if previous[-1] == "-" and previous[-2:-1].isalpha() and line[0].islower():
        return ""  # a hyphenated word: 「well-\nknown」
    return " "
