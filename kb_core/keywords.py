"""Keyword terms for Japanese text: NFKC-normalized CJK 2-grams, whole Latin words and codes.

The index (chunks.keywords) and questions go through the same `normalize` and `terms`, so a
term typed as ＺＰ‐２０４１ matches zp-2041 in a document, and 第二十二条 matches 第22条.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "CJK_RUN",
    "CONTENT_RUN",
    "KEYWORDS_VERSION",
    "SCRIPT_RUN",
    "bigrams",
    "normalize",
    "terms",
    "to_tsvector_literal",
]

# Part of the pipeline version: changing what `terms` emits means re-indexing.
# 4: 々〆〇, the kanji of CJK extensions B and later and the small katakana ㇰ-ㇿ join CJK runs.
#    Before, 人々 was indexed as 人 alone (々 fell between runs) while questions asked for 人々.
KEYWORDS_VERSION = "4"

# Dashes and minus signs that people type inside codes; NFKC leaves most of them alone.
_DASHES = re.compile(r"[\u2010\u2011\u2012\u2013\u2014\u2015\u2212\uff0d\u30fc\uff70]")
_KANJI_DIGITS = {"〇": 0, "零": 0, "一": 1, "二": 2, "三": 3, "四": 4, "五": 5,
                 "六": 6, "七": 7, "八": 8, "九": 9}
_KANJI_UNITS = {"十": 10, "百": 100, "千": 1000}
_ARTICLE = re.compile(r"第([〇零一二三四五六七八九十百千]+)([条章節項号款編])")
# The characters of 2-gram runs, declared once for the index and the question planner: kanji
# with the marks written as kanji (々 iteration, 〆 shime, 〇 zero) and CJK extension B on (𠮷),
# katakana with ー and ヶ, hiragana; Thai and Hangul are split into 2-grams too. The planner
# weighs 2-grams of kanji and katakana (content) above those touching hiragana (grammar).
_KANJI = r"\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff"
_CONTENT = rf"{_KANJI}\u30a0-\u30ff\u31f0-\u31ff"
_CJK = rf"\u3040-\u309f{_CONTENT}\u0e00-\u0e7f\uac00-\ud7af"
# A code: letters and digits joined by dashes (zp-2041, qc-2031); else a Latin word or digit run.
_TOKEN = re.compile(rf"[a-z0-9]+(?:-[a-z0-9]+)*|[{_CJK}]+")
CJK_RUN = re.compile(rf"[{_CJK}]+")
CONTENT_RUN = re.compile(rf"[{_CONTENT}]+")
# A word-like run of one script in normalized text: kanji, katakana, or a Latin word or code
# (zp-2041, 1.5). What the answerers and the answerability evidence read as a question's words.
SCRIPT_RUN = re.compile(
    r"[\u3400-\u4dbf\u4e00-\u9fff々〆ヵヶ]+|[ァ-ヺー]+|[a-z0-9]+(?:[-.][a-z0-9]+)*")
_CODE_DASH = re.compile(r"(?<=[a-z0-9])-(?=[a-z0-9])")
_UNHYPHENATED_CODE = re.compile(r"(?<![a-z0-9-])([a-z]{1,6})(\d{2,})(?![a-z0-9])")
_MAX_POSITION = 16383  # PostgreSQL's limit for a tsvector position


def _kanji_number(text: str) -> int:
    total, digit = 0, 0
    for ch in text:
        if ch in _KANJI_DIGITS:
            digit = digit * 10 + _KANJI_DIGITS[ch]
        else:
            total += (digit or 1) * _KANJI_UNITS[ch]
            digit = 0
    return total + digit


def normalize(text: str) -> str:
    """NFKC, case-folded, one dash inside codes, article numbers in Arabic digits."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)  # 5,000円 = 5000円
    text = _ARTICLE.sub(lambda m: f"第{_kanji_number(m.group(1))}{m.group(2)}", text)
    # A long-vowel mark is a dash only between Latin letters or digits (zp–2041, not コーヒー).
    text = re.sub(r"(?<=[a-z0-9])\s*[-" + _DASHES.pattern[1:-1] + r"]\s*(?=[a-z0-9])", "-", text)
    # A code written without its hyphen is the same code: zp2041 = zp-2041.
    return _UNHYPHENATED_CODE.sub(r"\1-\2", text)


def bigrams(run: str) -> list[str]:
    """The overlapping 2-grams of `run`, in order; none for fewer than two characters."""
    return [run[i : i + 2] for i in range(len(run) - 1)]


def terms(text: str) -> list[str]:
    """The keyword terms of `text`, in order: CJK 2-grams, Latin words, digit runs and codes."""
    out: list[str] = []
    for match in _TOKEN.finditer(normalize(text)):
        token = match.group()
        if token[0].isascii():
            parts = _CODE_DASH.split(token)
            out.extend(parts)
            if len(parts) > 1:
                out.append(token)
        else:
            out.extend(bigrams(token))
            # Every character but the last starts a 2-gram, which a one-character query finds
            # by prefix ('寮':*); the last one is kept alone so that it is found too.
            out.append(token[-1])
    return out


def to_tsvector_literal(text: str) -> str:
    """A tsvector literal of `text`'s terms with positions, for `%s::tsvector`."""
    positions: dict[str, list[int]] = {}
    for pos, term in enumerate(terms(text), start=1):
        positions.setdefault(term, []).append(min(pos, _MAX_POSITION))
    # tsvector keeps at most 256 positions per lexeme; more add nothing to ranking.
    return " ".join(
        "'{}':{}".format(term.replace("\\", "\\\\").replace("'", "''"), ",".join(map(str, p[:256])))
        for term, p in positions.items()
    )
