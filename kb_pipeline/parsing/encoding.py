"""Decoding of text files whose encoding nobody declared: UTF-8, Shift_JIS/CP932, EUC-JP, UTF-16."""

from __future__ import annotations

import codecs
import re

from kb_pipeline.parsing.model import ParseError

__all__ = ["decode_text", "normalize_newlines"]

_BOMS = (
    # UTF-32 before UTF-16: the UTF-32-LE BOM begins with the UTF-16-LE one.
    (codecs.BOM_UTF8, "utf-8-sig", "UTF-8"),
    (codecs.BOM_UTF32_LE, "utf-32", "UTF-32"),
    (codecs.BOM_UTF32_BE, "utf-32", "UTF-32"),
    (codecs.BOM_UTF16_LE, "utf-16", "UTF-16"),
    (codecs.BOM_UTF16_BE, "utf-16", "UTF-16"),
)
# Labels that browsers decode with a superset codec (WHATWG Encoding Standard).
_DECLARED_ALIASES = {
    "shift_jis": "cp932",
    "euc_jp": "euc_jp",
    "latin_1": "cp1252",
    "ascii": "cp1252",
}
_UTF8_SEQUENCE = re.compile(
    rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}"
)
_ISO2022JP_ESCAPE = re.compile(rb"\x1b\$[@B]|\x1b\([BJ]")
_HIGH_BYTES = bytes(range(0x80, 0x100))
# Python's CP932 maps the unused bytes 0x80, 0xA0 and 0xFD–0xFF to U+0080 and private-use
# characters; Japanese text never contains them, binary data often does.
_CP932_SINGLE_BYTE_OUTLIERS = re.compile("[\x80\uf8f0-\uf8f3]")
# C0 and C1 controls except tab and line feed (CR is gone once line ends are normalized).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Enough text to tell CP932 from EUC-JP; scoring whole files would cost seconds.
_SCORED_CHARS = 65536
_CONTROL_SHARE_LIMIT = 0.25


def normalize_newlines(text: str) -> str:
    """Return `text` with CRLF and lone CR line ends turned into LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def decode_text(data: bytes, suffix: str, declared: str | None = None) -> str:
    """Return the text of a text file, line ends normalized; ParseError if it is not text.

    `declared` is a charset the file names itself (HTML <meta charset>); it wins when the
    bytes are valid in it, else detection decides, as a wrong declaration is common.
    """
    text = _decode(data, suffix, declared)
    if "\x00" in text:
        raise ParseError(
            f"binary data under a text extension ({suffix}): NUL character at offset "
            f"{text.index(chr(0))}"
        )
    return _drop_control_characters(normalize_newlines(text), suffix)


def _decode(data: bytes, suffix: str, declared: str | None) -> str:
    for bom, codec, label in _BOMS:
        if data.startswith(bom):
            return _strict(
                data, codec, f"text starts with a {label} byte-order mark but is not valid {label}"
            )
    if b"\x00" in data:
        raise ParseError(
            f"binary data under a text extension ({suffix}): NUL bytes at offset {data.index(0)}"
        )
    codec = _declared_codec(declared)
    if codec is not None:
        try:
            return data.decode(codec)
        except UnicodeDecodeError:
            pass
    return _detect(data)


def _strict(data: bytes, codec: str, problem: str) -> str:
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        raise ParseError(f"{problem}: {exc.reason} at offset {exc.start}") from exc


def _declared_codec(declared: str | None) -> str | None:
    if not declared:
        return None
    try:
        name = codecs.lookup(declared.strip()).name.replace("-", "_")
    except LookupError:
        return None
    if name.startswith(("utf_16", "utf_32")):
        # A BOM-less page declaring UTF-16 is ASCII-compatible in practice (WHATWG: use UTF-8).
        return None
    return _DECLARED_ALIASES.get(name, name)


def _detect(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        utf8_error = exc
    if data.isascii() and _ISO2022JP_ESCAPE.search(data):
        return _strict(data, "iso2022_jp", "text uses ISO-2022-JP escapes but is not valid")
    if _looks_like_broken_utf8(data):
        raise ParseError(
            f"text is not valid UTF-8: {utf8_error.reason} at offset {utf8_error.start} "
            "(the rest of the file is UTF-8)"
        )
    candidates = []
    for codec in ("cp932", "euc_jp"):
        try:
            text = data.decode(codec)
        except UnicodeDecodeError:
            continue
        if codec != "cp932" or not _CP932_SINGLE_BYTE_OUTLIERS.search(text):
            candidates.append(text)
    if not candidates:
        raise ParseError(
            "text is not valid UTF-8, Shift_JIS/CP932 or EUC-JP "
            f"(first invalid UTF-8 byte at offset {utf8_error.start})"
        )
    # Both legacy codecs accept many byte strings; the wrong one yields half-width katakana
    # and rare kanji, so the more plausible Japanese wins (ties go to CP932, the commoner).
    return max(candidates, key=lambda text: _japanese_plausibility(text[:_SCORED_CHARS]))


def _looks_like_broken_utf8(data: bytes) -> bool:
    """Whether nearly all non-ASCII bytes form UTF-8 sequences, so a legacy codec would be wrong."""
    high = len(data) - len(data.translate(None, _HIGH_BYTES))
    covered = sum(len(match) for match in _UTF8_SEQUENCE.findall(data))
    return high > 0 and covered >= 0.9 * high


def _japanese_plausibility(text: str) -> int:
    score = 0
    for ch in text:
        code = ord(ch)
        if 0x3041 <= code <= 0x30FF:  # hiragana and katakana: the bulk of real Japanese
            score += 2
        elif 0x4E00 <= code <= 0x9FFF:
            score += 1 if _is_common_kanji(ch) else -1
        elif 0xFF61 <= code <= 0xFF9F or 0xE000 <= code <= 0xF8FF or 0x80 <= code <= 0x9F:
            score -= 2  # half-width katakana, private use, C1 controls: typical of mojibake
    return score


def _is_common_kanji(ch: str) -> bool:
    """JIS level-1 kanji (EUC-JP lead byte 0xB0–0xCF) cover everyday Japanese."""
    try:
        encoded = ch.encode("euc_jp")
    except UnicodeEncodeError:
        return False
    return len(encoded) == 2 and 0xB0 <= encoded[0] <= 0xCF


def _drop_control_characters(text: str, suffix: str) -> str:
    # Page breaks separate lines like line feeds do.
    text = text.replace("\f", "\n").replace("\v", "\n")
    controls = len(_CONTROL.findall(text))
    if controls > _CONTROL_SHARE_LIMIT * len(text):
        share = round(100 * controls / len(text))
        raise ParseError(
            f"binary data under a text extension ({suffix}): {share}% control characters"
        )
    # Stray controls (DOS end-of-file marks, terminal escapes) carry no text.
    return _CONTROL.sub("", text) if controls else text
