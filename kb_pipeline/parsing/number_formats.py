"""A workbook cell's value as Excel shows it under its number format: 0.05 under 「0%」 is 5%,
39800 under 「#,##0」 is 39,800, 2 under 「0.0」 is 2.0, a date under 「yyyy年m月」 is 2021年4月.
An employee reads and asks about the shown value, so that is what is indexed and answered."""

from __future__ import annotations

import datetime as dt
import re
from decimal import ROUND_HALF_UP, Decimal

__all__ = ["shown"]

# What a format section holds besides digits: [Red], [$-411], [DBNum1] (colour, locale, numeral
# system), _x (a space as wide as x) and *x (repeat x to fill the cell).
_BRACKETS = re.compile(r"\[[^\]]*\]")
_PADDING = re.compile(r"[_*].")
_QUOTED = re.compile(r'"([^"]*)"|\\(.)')
_NUMBER = re.compile(r"[#0?,]*[0#?](?:\.[0#?]*)?,*|\.[0#?]+")
_DATE_TOKEN = re.compile(r"yyyy|yy|mmmm|mmm|mm|m|dd|d|hh|h|ss|s", re.IGNORECASE)
# Japanese era (ggge) and weekday (aaa) formats: written plainly rather than half rendered.
_UNRENDERED_DATE = re.compile(r"[ge]|aaa", re.IGNORECASE)


def shown(value: object, number_format: str | None) -> str | None:
    """`value` under `number_format`, or None when the format is General, text, or one this
    reader does not render (the caller then writes the value plainly)."""
    fmt = (number_format or "General").strip()
    if fmt in ("General", "@", ""):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | dt.date | dt.time):
        return None
    if isinstance(value, dt.date | dt.time):
        return _date(value, fmt)
    sections = _split_sections(fmt)
    section = sections[1] if value < 0 and len(sections) > 1 else sections[0]
    sign = "-" if value < 0 and len(sections) == 1 else ""
    return _number(abs(value) if value < 0 else value, section, sign)


def _split_sections(fmt: str) -> list[str]:
    """The format's ;-separated sections (positive; negative; zero; text), quotes respected."""
    sections, current, quoted = [], [], False
    for char in fmt:
        if char == '"':
            quoted = not quoted
        if char == ";" and not quoted:
            sections.append("".join(current))
            current = []
        else:
            current.append(char)
    sections.append("".join(current))
    return sections


def _number(value: float, section: str, sign: str) -> str | None:
    section = _PADDING.sub("", _BRACKETS.sub("", section))
    literal = _QUOTED.sub(lambda m: "\0" * len(m[0]), section)  # digits inside quotes are text
    match = _NUMBER.search(literal)
    if match is None:
        return None
    pattern = match[0]
    percent = "%" in literal
    scaled = value * 100 if percent else value
    # Commas right after the digits divide by a thousand each (「#,##0,」 shows thousands).
    scaled /= 1000 ** (len(pattern) - len(pattern.rstrip(",")))
    decimals = len(pattern.split(".", 1)[1]) if "." in pattern else 0
    grouped = "," in pattern.rstrip(",")
    # Excel rounds a half away from zero (2.5 → 3), Python's format to even (2.5 → 2).
    rounded = Decimal(repr(scaled)).quantize(Decimal(1).scaleb(-decimals), ROUND_HALF_UP)
    digits = f"{rounded:,}" if grouped else f"{rounded}"
    before = _literal_text(section[: match.start()])
    after = _literal_text(section[match.end():])
    return f"{sign}{before}{digits}{after}"


def _literal_text(part: str) -> str:
    """The text a format writes around the number: quoted text, escaped characters, symbols."""
    return _QUOTED.sub(lambda m: m[1] if m[1] is not None else m[2], part)


def _date(value: dt.date | dt.time, fmt: str) -> str | None:
    section = _PADDING.sub("", _BRACKETS.sub("", _split_sections(fmt)[0]))
    bare = _QUOTED.sub("", section)
    # A time of day is written plainly (the sheet's default for a date and time is rarely
    # chosen by its author); so are formats this reader does not render.
    if (not _DATE_TOKEN.search(bare) or _UNRENDERED_DATE.search(bare)
            or re.search("[hs]", bare, re.IGNORECASE)):
        return None
    out, i = [], 0
    tokens = list(_DATE_TOKEN.finditer(section))
    for index, token in enumerate(tokens):
        out.append(_literal_text(section[i: token.start()]))
        out.append(_date_part(value, token[0].lower(), tokens, index))
        i = token.end()
    out.append(_literal_text(section[i:]))
    return "".join(out)


def _date_part(value: dt.date | dt.time, token: str, tokens: list[re.Match[str]],
               index: int) -> str:
    """One token of a date format; m is minutes after an hour or before seconds, else month."""
    if token.startswith("m"):
        before = tokens[index - 1][0].lower() if index else ""
        after = tokens[index + 1][0].lower() if index + 1 < len(tokens) else ""
        if token in ("m", "mm") and (before.startswith("h") or after.startswith("s")):
            minute = getattr(value, "minute", 0)
            return f"{minute:02d}" if token == "mm" else str(minute)
    parts = {
        "yyyy": lambda v: f"{v.year:04d}", "yy": lambda v: f"{v.year % 100:02d}",
        "mm": lambda v: f"{v.month:02d}", "m": lambda v: str(v.month),
        "mmm": lambda v: str(v.month), "mmmm": lambda v: str(v.month),
        "dd": lambda v: f"{v.day:02d}", "d": lambda v: str(v.day),
        "hh": lambda v: f"{v.hour:02d}", "h": lambda v: str(v.hour),
        "ss": lambda v: f"{v.second:02d}", "s": lambda v: str(v.second),
    }
    render = parts.get(token)
    try:
        return render(value) if render else ""
    except AttributeError:  # a time has no year, a date no hour
        return ""
