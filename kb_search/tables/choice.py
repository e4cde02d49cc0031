"""Which table of the documents a search found answers the question, or why none can: a row
the question names sits in a table without the column it asks for (「ZX-3100の消費電力」 where
only the ZP series lists 消費電力), or the question names a row shaped like a table's keys
that the table lacks (「G9の基本給」 where the grades run G1 to G8)."""

from __future__ import annotations

import re
from typing import NamedTuple

from kb_search.tables.cell_answers import TableAnswer, answer_table
from kb_search.tables.reading import TableQuestion, bare, column_head, normalized, read_question
from kb_search.tables.stored import StoredTable

__all__ = ["FoundPassage", "choose_answer"]

_CODE = re.compile(r"[a-z]+-?\d+(?:-\d+)*")
# A name right before the column a question asks: 「応接室aの定員」, 「名刺管理サービスの更新月」.
_NAME_BEFORE = re.compile(r"(?:^|[はがをにでのも、「」])"
                          r"(?P<name>[\u4e00-\u9fff\u30a0-\u30ffa-z0-9ー・\-]{3,})の$")
_WHY = re.compile(r"なぜ|何故|どうして|理由|経緯|いきさつ")
_NAMED_TABLE = 4  # character pairs of a table's name a count of all its rows must write


class FoundPassage(NamedTuple):
    """A passage the search found, as the choice reads it: its document's title, its text."""

    title: str
    text: str


def choose_answer(question: str, tables: list[StoredTable], ranks: dict[int, int],
                  expansions: list[str], passages: list[FoundPassage]) -> TableAnswer | None:
    """The answer of the table that accounts for most of the question (its names, rows and
    caption; the search's order breaks ties), a "missing" answer for a near miss, or None when
    no table answers it and the passages' text is left to (`ranks`: a passage's rank by its
    chunk id; `passages`: what the search found)."""
    q = normalized(question)
    if _WHY.search(q):  # a table holds values, not their reasons
        return None
    readings = [r for t in tables if (r := read_question(question, t, expansions))]
    scored = [(_score(q, r), r) for r in readings]
    answerable = [(score, r) for score, r in scored if score > 0 and (r.kind != "cell" or r.rows)]
    if answerable:
        score, best = max(answerable, key=lambda item: (item[0], -_rank(item[1].table, ranks)))
        # A table that accounts for as much of the question without a row of it (「タイに出張
        # する一般社員の日当」: 別表3's 一般社員 column, タイ in none of its rows) leaves the
        # answer to the passages' text rather than to the other table's cell.
        if any(s >= score for s, r in scored if r.kind == "cell" and not r.rows):
            return None
        # A row named only by a cell that is the name of a document the search found (「QC-2031
        # で対象になったロット」, a ledger's row citing report QC-2031) asks about that document:
        # its own text answers.
        titles = [normalized(p.title) for p in passages]
        if any(written in title for written in best.named_by.values() for title in titles):
            return None
        return answer_table(best, question)
    return _near_miss(q, readings, tables, [normalized(f"{p.title} {p.text}") for p in passages])


def _score(q: str, read: TableQuestion) -> int:
    """How much of the question a reading accounts for. Counting every row of a table names
    no column or row of it: only the table's own name counts, and must be written."""
    named = _named_by_caption(q, read.table)
    if read.kind == "count" and not read.conditions:
        return named if named >= _NAMED_TABLE else 0
    return read.score + named


def _rank(table: StoredTable, ranks: dict[int, int]) -> int:
    return min((ranks[r.chunk_id] for r in table.rows if r.chunk_id in ranks), default=1000)


def _named_by_caption(q: str, table: StoredTable) -> int:
    """How much the question names the table: the character pairs of its caption's first line
    it writes, and twice the length of its sheet's name where it writes that whole
    (「LTシリーズ」 tells the LT sheet from the HV one, which share every column)."""
    caption = normalized(table.caption.splitlines()[0] if table.caption else table.title)
    pairs = {caption[i:i + 2] for i in range(len(caption) - 1)}
    sheet = normalized((table.location or "").removeprefix("シート: "))
    return (sum(p in q for p in pairs if len(set(p)) == 2)
            + (2 * len(sheet) if len(sheet) >= 2 and sheet in q else 0))


def _near_miss(q: str, readings: list[TableQuestion], tables: list[StoredTable],
               passages: list[str]) -> TableAnswer | None:
    """Not found, when the question names a name like a table's keys that no passage found
    writes (「応接室Aの定員」), a row's key and a column its table lacks though another table
    has it (「ZX-3100の消費電力」), or a code shaped like a table's keys that it lacks."""
    if not readings:
        return None
    for reading in readings:
        subject = _subject(q, reading)
        if subject and _like_a_key(subject, reading.table) and not any(
                subject in text for text in passages):
            return TableAnswer(None, [], missing=f"{reading.table.name} has no row "
                                                 f"{subject.upper()}")
    column_tables = {id(r.table) for r in readings}
    for table in tables:
        if id(table) in column_tables:
            continue
        # Only 「KEYの<column>は」: a row's own value asked, where its table lacks the column
        # another table has (「ZX-3100の消費電力」, 「昭和バルブの担当部署」).
        for key in {normalized(r.cells[0]) for r in table.rows if len(r.cells[0]) >= 2}:
            asked = [r for r in readings if r.columns and f"{key}の{_head(r)}" in q]
            if asked:
                column = asked[0].table.columns[asked[0].columns[0]]
                return TableAnswer(None, [], missing=f"the table listing {key.upper()} has no "
                                                     f"column {column}")
    codes = _CODE.findall(q)
    for reading in readings:
        shapes = {_shape(normalized(r.cells[0])) for r in reading.table.rows}
        for code in codes:
            if _shape(code) in shapes and not any(normalized(r.cells[0]) == code
                                                  for r in reading.table.rows):
                return TableAnswer(None, [], missing=f"{reading.table.name} has no row "
                                                     f"{code.upper()}")
    return None


def _head(reading: TableQuestion) -> str:
    """How the question writes the column a reading asks."""
    return column_head(reading.table, reading.columns[0])


def _subject(q: str, reading: TableQuestion) -> str | None:
    """What a cell question that names a column but no row asks about, where it is a name
    (kanji, katakana, letters, digits; no kana of a phrase): 「応接室Aの定員は」 → 応接室a."""
    if reading.kind != "cell" or reading.rows or not reading.columns:
        return None
    at = q.find(_head(reading))
    match = _NAME_BEFORE.search(q[:at]) if at > 0 else None
    return match["name"] if match else None


def _like_a_key(name: str, table: StoredTable) -> bool:
    """Whether a name looks like the table's keys, so that its absence is the table's: it
    shares their first or last two characters (応接室A, 応接室B; 名刺管理サービス, Web会議
    サービス) or their scripts character by character (光和電子, 東洋精工)."""
    keys = [bare(r.cells[0]) for r in table.rows if r.cells[0]]
    return any(k[:2] == name[:2] or k[-2:] == name[-2:] or _scripts(k) == _scripts(name)
               for k in keys)


def _scripts(text: str) -> str:
    """Each character's script: h (kanji), k (katakana), a (letters), 9 (digits), - (other)."""
    def script(char: str) -> str:
        if "\u4e00" <= char <= "\u9fff":
            return "h"
        if "\u30a0" <= char <= "\u30ff":
            return "k"
        return "a" if char.isalpha() and char.isascii() else "9" if char.isdigit() else "-"
    return "".join(map(script, text))


def _shape(text: str) -> str:
    """A key's shape, letters as a and digits as 9: G6 → a9, ZP-2041 → aa-9999."""
    return re.sub(r"\d", "9", re.sub(r"[a-z]", "a", text))
