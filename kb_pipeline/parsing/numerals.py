"""Numbers as Japanese documents write them: Arabic, full-width and kanji (二十二, 二〇二五)."""

from __future__ import annotations

__all__ = ["KANJI_DIGITS", "parse_number"]

KANJI_DIGITS = "〇零一二三四五六七八九"
_KANJI_VALUES = {**{ch: i for i, ch in enumerate("〇一二三四五六七八九")}, "零": 0}
_KANJI_UNITS = {"十": 10, "百": 100, "千": 1000}
_FULL_WIDTH_DIGITS = str.maketrans("０１２３４５６７８９", "0123456789")


def parse_number(text: str) -> int:
    """Return the value of `text` ("22", "２２", "二十二", "二〇二五"); ValueError if it is none."""
    text = text.strip().translate(_FULL_WIDTH_DIGITS)
    if text.isascii() and text.isdigit():
        return int(text)
    if not text or any(ch not in _KANJI_VALUES and ch not in _KANJI_UNITS for ch in text):
        raise ValueError(f"not a number: {text!r}")
    if not any(ch in _KANJI_UNITS for ch in text):
        # Digit-by-digit style, as in years written 二〇二五.
        return int("".join(str(_KANJI_VALUES[ch]) for ch in text))
    total = digit = 0
    for ch in text:
        if ch in _KANJI_UNITS:
            total += (digit or 1) * _KANJI_UNITS[ch]
            digit = 0
        else:
            digit = _KANJI_VALUES[ch]
    return total + digit
