"""A question read against a table, answered from its cells: the cell stated in a sentence, or
the extreme, the count or the comparison computed over the rows the caller may read, each
sentence with the rows it rests on. Ties are stated as ties; an ambiguous column or row lists
the candidates with their cells; an empty cell is not an answer."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

import msgspec

from kb_search.tables.reading import (
    TableQuestion,
    cell_number,
    column_head,
    normalized,
    numeric_column,
)
from kb_search.tables.stored import StoredRow, StoredTable

__all__ = ["CitedCell", "TableAnswer", "TableSentence", "answer_table", "recount"]

_LISTED = 10  # rows named in a count's sentence, at most
_ADJECTIVE = re.compile(r"(高|低|大き|小さ|多|少な|長|短|重|軽|安|広|狭|新し|古|早|遅)い")


class CitedCell(msgspec.Struct, frozen=True):
    """A cell an answer states or rests on, as a citation points at it (highlighted on the page
    and in the source view): its row among its table's data rows, its column, its value."""

    table: int  # the table's number in its document, from 0
    row: int
    column: str
    value: str


@dataclass
class TableSentence:
    """One sentence of a table answer and the rows it rests on (their passages are cited)."""

    text: str
    rows: list[StoredRow]
    cells: list[CitedCell] = field(default_factory=list)


@dataclass
class TableAnswer:
    """What a table answers: its sentences, or why it cannot (`missing`). `computed` is the
    value no passage writes (a count, a tie), which verification recomputes from the rows."""

    question: TableQuestion | None
    sentences: list[TableSentence]
    missing: str | None = None
    computed: list[str] = field(default_factory=list)
    given: list[str] = field(default_factory=list)  # the question's own bounds: 「10,000円以上」


def answer_table(read: TableQuestion, question: str) -> TableAnswer | None:
    """The answer `read` asks of its table; None when the table cannot compute it (no column
    of numbers to compare), which leaves the question to the passages' text."""
    if read.kind == "cell":
        return _cell(read)
    if read.kind == "count":
        return _count(read)
    if read.kind == "extreme":
        return _extreme(read, question)
    return _comparison(read, question)


def _cell(read: TableQuestion) -> TableAnswer:
    """The cells the question asks of its row, each column it names stated; the candidates
    where a row or a column under a merged header is ambiguous; not found where the table
    leaves the cell empty."""
    table = read.table
    if len(read.rows) > 1:  # an ambiguous row: each candidate with its cell
        rows = [table.rows[r] for r in read.rows]
        column = read.columns[0]
        parts = "、".join(f"{_name(table, r)}は{_value(table, column, r)}" for r in rows)
        return TableAnswer(read, [TableSentence(f"{_label(table, column)}は、{parts}です。", rows,
                                                [_cell_ref(table, r, column) for r in rows])])
    row = table.rows[read.rows[0]]
    groups: dict[str, list[int]] = {}
    for column in read.columns:
        groups.setdefault(_head(table, column), []).append(column)
    said, cells = [], []
    for head, columns in groups.items():
        shown = [c for c in columns if c in read.ambiguous_columns] or columns[:1]
        if len(shown) > 1:  # under one merged header, not told apart: every candidate
            said.append(f"{head}は" + "、".join(f"{_qualifier(table, c)}が"
                                               f"{_value(table, c, row)}" for c in shown))
        elif not row.cells[shown[0]].strip():
            return TableAnswer(read, [], missing=(f"the table leaves {table.columns[shown[0]]}"
                                                  f" of {_name(table, row)} empty"))
        else:
            said.append(f"{_label(table, shown[0])}は{_value(table, shown[0], row)}")
        cells += [_cell_ref(table, row, c) for c in shown]
    name = _name(table, row)
    if (written := read.named_by.get(read.rows[0])) and normalized(name) != written:
        name = f"{name}（{table.rows[read.rows[0]].cells[_column_of(row, written)]}）"
    text = f"{name}の{'、'.join(said)}です。"
    sentences = [TableSentence(text, [row], cells)]
    for column in dict.fromkeys(c.column for c in cells):
        sentences += [n for n in _notes_on(table, table.columns.index(column))
                      if n.text not in {s.text for s in sentences}]
    return TableAnswer(read, sentences)


def _count(read: TableQuestion) -> TableAnswer:
    table = read.table
    rows = [r for r in table.rows if all(c.holds(r.cells) for c in read.conditions)]
    names = "、".join(_name(table, r) for r in rows[:_LISTED]) + ("ほか" if len(rows) > _LISTED
                                                                  else "")
    where = "、".join(f"{_label(table, c.column)}が{c.text}" for c in read.conditions)
    if where:
        text = f"{table.name}で{where}のものは{len(rows)}件です。"
    else:
        text = f"{table.name}には{len(rows)}件あります。"
    cells = [_cell_ref(table, r, c.column) for r in rows for c in read.conditions]
    sentences = [TableSentence(text, table.rows, cells)]
    if rows:  # which, after the count, so that the count leads
        sentences.append(TableSentence(f"該当：{names}。", rows))
    return TableAnswer(read, sentences, computed=[str(len(rows))],
                       given=[c.text for c in read.conditions if c.number is not None])


def _measured(read: TableQuestion) -> int | None:
    """The numeric column an extreme or a comparison measures: the first named one that no
    condition is on, else the table's only column of numbers."""
    bound = {c.column for c in read.conditions}
    numeric = [c for c in read.columns if c not in bound and numeric_column(read.table, c)]
    if numeric:
        return numeric[0]
    only = [c for c in range(len(read.table.columns)) if numeric_column(read.table, c)]
    return only[0] if len(only) == 1 else None


def _extreme(read: TableQuestion, question: str) -> TableAnswer | None:
    table = read.table
    column = _measured(read)
    if column is None:
        return None
    rows = [r for r in table.rows if all(c.holds(r.cells) for c in read.conditions)]
    valued = [(v, r) for r in rows if (v := cell_number(r.cells[column])) is not None]
    if not valued:  # no row meets the conditions with a value: none is the largest
        return TableAnswer(read, [], missing=f"no row meeting the conditions states "
                                             f"{table.columns[column]}")
    best = max(v for v, _ in valued) if read.largest else min(v for v, _ in valued)
    winners = [r for v, r in valued if v == best]
    said = _adjective(question, read.largest)
    reported = _reported(read, column)
    names = "と".join(_name(table, r, reported) for r in winners)
    value = _value(table, column, winners[0])
    both = "いずれも" if len(winners) > 1 else ""
    text = (f"{table.name}の{len(valued)}件のうち{_label(table, column)}がいちばん{said}のは"
            f"{names}（{both}{value}）です。")
    cells = [_cell_ref(table, r, column) for _, r in valued]
    return TableAnswer(read, [TableSentence(text, [r for _, r in valued], cells)],
                       computed=[str(len(valued))],
                       given=[c.text for c in read.conditions if c.number is not None])


def _comparison(read: TableQuestion, question: str) -> TableAnswer | None:
    table = read.table
    column = _measured(read)
    if column is None:
        return None
    first, second = (table.rows[r] for r in read.rows[:2])
    a, b = cell_number(first.cells[column]), cell_number(second.cells[column])
    if a is None or b is None:
        return None
    values = (f"{_name(table, first)} {_value(table, column, first)}、"
              f"{_name(table, second)} {_value(table, column, second)}")
    if a == b:
        text = f"{_label(table, column)}は同じです（{values}）。"
    else:
        winner = first if (a > b) == read.largest else second
        said = _adjective(question, read.largest)
        text = f"{_name(table, winner)}のほうが{_label(table, column)}が{said}です（{values}）。"
    cells = [_cell_ref(table, first, column), _cell_ref(table, second, column)]
    return TableAnswer(read, [TableSentence(text, [first, second], cells)])


def _column_of(row: StoredRow, written: str) -> int:
    """The column of the row's cell that holds what the question wrote."""
    return next(c for c, cell in enumerate(row.cells) if written in normalized(cell))


def _reported(read: TableQuestion, measured: int) -> int:
    """The column that names an extreme's rows: one the question names besides the measured
    one and its conditions (「〜の型式は」), else the table's first."""
    bound = {c.column for c in read.conditions}
    others = [c for c in read.columns if c != measured and c not in bound
              and not numeric_column(read.table, c)]
    return others[0] if others else 0


def _notes_on(table: StoredTable, column: int) -> list[TableSentence]:
    """The table's notes that name the column (a cap and its regional addition go together),
    each resting on the table's last row, whose passage holds them."""
    head = column_head(table, column)
    if len(head) < 2:
        return []
    return [TableSentence(note, [table.rows[-1]]) for note in table.notes
            if head in normalized(note)]


def _name(table: StoredTable, row: StoredRow, column: int = 0) -> str:
    return row.cells[column] or next((c for c in row.cells if c), "")


def _head(table: StoredTable, column: int) -> str:
    return table.columns[column].split("：")[0]


def _qualifier(table: StoredTable, column: int) -> str:
    return "：".join(table.columns[column].split("：")[1:]) or table.columns[column]


def _label(table: StoredTable, column: int) -> str:
    """A column as a sentence names it: 「日当（管理職）」 for a column under a merged header,
    「最大推力」 for 「最大推力 (N)」 (the value carries the unit)."""
    head, *rest = table.columns[column].split("：")
    unit = table.units[column] if column < len(table.units) else None
    if unit:
        head = re.sub(rf"\s*[（(]\s*(?:単位\s*[:：]\s*)?{re.escape(unit)}\s*[）)]\s*$", "",
                      head) or head
    return f"{head}（{'・'.join(rest)}）" if rest else head


def _value(table: StoredTable, column: int, row: StoredRow) -> str:
    """A cell with its column's unit where the cell does not write one: 425 N, 2,600円."""
    cell = row.cells[column]
    unit = table.units[column] if column < len(table.units) else None
    if not unit or not re.fullmatch(r"[-+±]?[\d,.]+", cell.strip()):
        return cell
    return f"{cell} {unit}" if unit[0].isascii() else f"{cell}{unit}"


def _adjective(question: str, largest: bool) -> str:
    said = _ADJECTIVE.search(question)
    return said[0] if said else ("大きい" if largest else "小さい")


def _cell_ref(table: StoredTable, row: StoredRow, column: int) -> CitedCell:
    return CitedCell(table=table.table_no, row=row.row_no, column=table.columns[column],
                     value=row.cells[column])


def recount(answer: TableAnswer) -> list[Decimal]:
    """The values `answer` computed, recomputed from the rows it cites."""
    read = answer.question
    if read is None or not answer.sentences:
        return []
    rows = answer.sentences[0].rows
    if read.kind == "count":
        return [Decimal(sum(all(c.holds(r.cells) for c in read.conditions) for r in rows))]
    return [Decimal(len(rows))]
