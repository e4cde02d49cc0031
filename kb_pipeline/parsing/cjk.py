"""Character classes for Japanese text: what counts as CJK, where sentences end, display width."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["SENTENCE_ENDINGS", "display_width", "is_cjk", "join_line_breaks"]

# A line ending in one of these closes a sentence, so a following line is not its continuation.
SENTENCE_ENDINGS = frozenset("。！？!?．")

_CJK_RANGES = (
    (0x3000, 0x303F),  # CJK symbols and punctuation (、「」々〆)
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x31F0, 0x31FF),  # katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF01, 0xFFEF),  # full-width forms and half-width katakana
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)


def is_cjk(char: str) -> bool:
    """Return whether `char` is Japanese script or full-width punctuation (set without spaces)."""
    code = ord(char)
    return any(low <= code <= high for low, high in _CJK_RANGES) and char != "\u3000"


def display_width(text: str) -> int:
    """Return the width of `text` in half-width cells: full-width characters count twice."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


_LINE_BREAKS = re.compile(r"[\r\n\v\f\u2028\u2029]+")


def join_line_breaks(text: str) -> str:
    """Return `text` on one line: a break between CJK characters vanishes, others become a space.

    Japanese is written without spaces, so a break inside 「社員は\n経費を」 was only layout.
    """
    lines = [line.strip(" \t") for line in _LINE_BREAKS.split(text)]
    parts: list[str] = []
    for line in filter(None, lines):
        if parts:
            parts.append("" if is_cjk(parts[-1][-1]) and is_cjk(line[0]) else " ")
        parts.append(line)
    return "".join(parts).strip()
