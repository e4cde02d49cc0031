"""A table's cells read as a table (`Table`): its header rows joined into column names, its data
rows told from its notes and totals, and each column's unit. Every parser that meets a table
(workbooks, CSV, Markdown, HTML, Word, PowerPoint) hands its rows here, so all read alike."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from kb_pipeline.parsing.cjk import join_line_breaks
from kb_pipeline.parsing.model import Table

__all__ = ["is_note", "read_table", "unit_in"]

# A row that opens with one of these is a note under the table, not data: 「注1」「※」「(注)」.
_NOTE = re.compile(r"\s*(?:注\s*[0-9０-９]*[\s　.:：)）]|注$|※|＊|\*|[(（]注[)）]|備考[\s:：])")
# A row whose first cells say this is a total: counted from the data, not part of it.
_TOTALS = frozenset({"合計", "小計", "総計", "計", "total", "subtotal", "合計額"})
_CURRENCY = re.compile(r"円|ドル|ユーロ|元|バーツ|[$¥€]")
_MONEY = re.compile(r"額|料|費|価|金|代|賃|給|当|円|予算|売上|コスト|利益|経費")
# 「（単位：円）」「単位：千円」 in a caption, a note or a header.
_UNIT_STATED = re.compile(r"単位\s*[:：]\s*([^\s）)、,，。]+)")
# The parenthesis that closes a header: 「最大推力 (N)」「定格吐出量 (L/min)」「加算額（円）」.
_HEADER_PAREN = re.compile(r"[(（]([^()（）]{1,12})[)）]\s*$")
# What a unit in parentheses looks like: letters and symbols (mm, L/min, MPa, %), or a counter
# word. 「（1日あたり）」「（月額）」 qualify a header without being its unit.
_UNIT_WORD = re.compile(
    r"[A-Za-zµμΩ°℃%/⁰-⁹²³]+[0-9]?|[千百万億]*円|[%％]|個|台|日|時間|分|秒|人|名|件|回|年|か月|ヶ月|本|枚|"
    r"箇所|か所|点|歳|才|倍")


def read_table(rows: Sequence[Sequence[str]], header_at: int = 0, *,
               caption: Sequence[str] = (), notes: Sequence[str] = (),
               location: str | None = None) -> Table | None:
    """The table whose header starts at `rows[header_at]`: the rows above it join the caption,
    a second header row is taken when the first spans it (merged cells), and rows below are
    data, notes (注, ※ and what follows them) or totals (合計). None when no data row is left or
    the table has fewer than two columns: then it is text, not a table."""
    width = max((len(row) for row in rows), default=0)
    grid = [[_clean(cell) for cell in row] + [""] * (width - len(row)) for row in rows]
    if header_at > 0 and _tops(grid[header_at - 1], grid[header_at]):
        header_at -= 1
    caption_lines = [*caption, *(_line(row) for row in grid[:header_at] if any(row))]
    body = grid[header_at:]
    if width < 2 or not body:
        return None
    depth = 2 if _spans_next(body) else 1
    header, data, note_lines = body[:depth], [], list(notes)
    in_notes = False  # a note's continuation lines (one cell each) follow it
    for row in body[depth:]:
        if not any(row):
            continue
        if _NOTE.match(_line(row)) or (in_notes and sum(1 for cell in row if cell) == 1):
            note_lines.append(_line(row))
            in_notes = True
        elif not _is_total(row):
            data.append(row)
            in_notes = False
    if not data:
        return None
    columns = _column_names(header)
    stated = next((m[1] for text in (*caption_lines, *note_lines)
                   if (m := _UNIT_STATED.search(text))), None)
    # The table's stated unit is that of its numbers, not of a column of names; a stated
    # currency that of its amounts, not of its days or seats (「（単位：円）」 over 日数, 定員).
    units = [unit_in(name) or (stated if _mostly_numbers(data, i) and (
                 not stated or not _CURRENCY.search(stated) or _MONEY.search(name)) else None)
             for i, name in enumerate(columns)]
    return Table(columns=columns, units=units,
                 rows=data, caption="\n".join(caption_lines), notes=note_lines,
                 location=location)


def _tops(above: list[str], header: list[str]) -> bool:
    """Whether the row above the header the sheet chose is the header's top row: it names
    columns the header leaves empty (「役職」 merged down) and spans ones it names (「日当」 over
    A地域, B地域 …)."""
    filled = [bool(cell) for cell in above]
    return (sum(filled) >= 2 and any(a and not h for a, h in zip(above, header, strict=True))
            and any(h and not a for a, h in zip(above, header, strict=True)))


def is_note(line: str) -> bool:
    """Whether a line under a table is one of its notes: 「注1 …」「※ …」."""
    return bool(_NOTE.match(line))


def unit_in(header: str) -> str | None:
    """The unit a column header states: 「最大推力 (N)」 → N, 「金額（単位：千円）」 → 千円."""
    if stated := _UNIT_STATED.search(header):
        return stated[1]
    paren = _HEADER_PAREN.search(header)
    if paren and _UNIT_WORD.fullmatch(unicodedata.normalize("NFKC", paren[1]).strip()):
        return paren[1].strip()
    return None


def _clean(cell: object) -> str:
    """A cell's text on one line, as its row's text writes it (render_row)."""
    return " ".join(join_line_breaks(str(cell)).split()) if cell is not None else ""


def _line(row: Sequence[str]) -> str:
    return " ".join(cell for cell in row if cell)


def _is_total(row: Sequence[str]) -> bool:
    return any(unicodedata.normalize("NFKC", cell).replace(" ", "").lower() in _TOTALS
               for cell in row[:2])


def _spans_next(body: list[list[str]]) -> bool:
    """Whether the header's cells span a second header row: the first row leaves columns empty
    (a merged cell's text stands in its first column only) that the next row names, and the next
    row holds no number, as a data row would."""
    if len(body) < 3:
        return False
    first, second = body[0], body[1]
    # A merged cell leaves the columns it spans empty, or repeats its text in them (Word).
    gaps = [i for i, cell in enumerate(first) if i > 0 and (not cell or cell == first[i - 1])]
    named = [i for i in gaps if second[i]]
    return bool(named) and not any(_is_number(cell) for cell in second)


def _mostly_numbers(data: list[list[str]], column: int) -> bool:
    values = [row[column] for row in data if row[column]]
    return bool(values) and sum(map(_is_number, values)) * 2 > len(values)


def _is_number(cell: str) -> bool:
    return bool(re.fullmatch(r"[-+−]?[¥$￥]?[0-9０-９][0-9０-９,，.．]*\s*[%％円]?", cell))


def _column_names(header: list[list[str]]) -> list[str]:
    """Each column's name: its header cells top-down, a merged cell's text spread right over the
    empty cells it spans, and an empty lower cell taking the text above it."""
    spread = []
    for depth, row in enumerate(header):
        last = depth == len(header) - 1
        filled, current = [], ""
        for cell in row:
            current = cell if cell or last else current
            filled.append(cell or ("" if last else current))
        spread.append(filled)
    names = []
    for column in zip(*spread, strict=True):
        parts: list[str] = []
        for part in column:
            if part and part not in parts:
                parts.append(part)
        names.append("：".join(parts))
    return names
