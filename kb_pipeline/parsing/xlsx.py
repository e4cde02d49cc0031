"""Excel workbooks (openpyxl, read-only): per sheet a heading and its rows as standalone tables."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING

import openpyxl

from kb_pipeline.parsing.blocks import render_row
from kb_pipeline.parsing.model import Block, ParsedDocument, ParseError
from kb_pipeline.parsing.ooxml import check_package
from kb_pipeline.parsing.titles import meaningful_title

if TYPE_CHECKING:
    from openpyxl.worksheet._read_only import ReadOnlyWorksheet

__all__ = ["MAX_CELLS", "ROWS_PER_BLOCK", "parse_xlsx"]

MIME = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
# Beyond this a workbook is a data dump, not a document; fail precisely instead of
# holding millions of cells in memory.
MAX_CELLS = 200_000
# Lines per table block, the repeated header row included, so each block stands alone.
ROWS_PER_BLOCK = 40
_HEADER_SEARCH_ROWS = 10


def parse_xlsx(data: bytes, stem: str) -> ParsedDocument:
    """Return each sheet as a level-1 heading followed by table blocks of its non-empty rows."""
    check_package(data, "XLSX", "spreadsheetml.sheet")
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many types on malformed packages
        raise ParseError(f"not a readable XLSX workbook: {type(exc).__name__}: {exc}") from exc
    try:
        blocks: list[Block] = []
        budget = _CellBudget()
        for sheet in workbook.worksheets:
            try:
                blocks.extend(_sheet_blocks(sheet, budget))
            except ParseError:
                raise
            except Exception as exc:  # malformed sheet XML surfaces while rows are read
                raise ParseError(
                    f"sheet '{sheet.title}' could not be read: {type(exc).__name__}: {exc}"
                ) from exc
        title = meaningful_title(workbook.properties.title) or stem
    finally:
        workbook.close()  # read-only workbooks keep the ZIP open until closed
    if not blocks:
        raise ParseError("workbook has no non-empty cells")
    return ParsedDocument(title=title, mime=MIME, blocks=blocks)


class _CellBudget:
    def __init__(self) -> None:
        self.used = 0

    def spend(self, cells: int, sheet: str, row: int) -> None:
        self.used += cells
        if self.used > MAX_CELLS:
            raise ParseError(
                f"workbook too large: more than {MAX_CELLS:,} cells "
                f"(limit reached in sheet '{sheet}' at row {row})"
            )


def _sheet_blocks(sheet: ReadOnlyWorksheet, budget: _CellBudget) -> list[Block]:
    location = f"シート: {sheet.title}"
    rows = list(_rows(sheet, budget))
    if not rows:
        return []
    # Sheets laid out from column B or C (「Excel方眼紙」) would start every row with " | ".
    offset = min(next(i for i, value in enumerate(row) if value) for row in rows)
    lines = [render_row(row[offset:]) for row in rows]
    start = _header_index(rows)
    preamble, header, body = lines[:start], lines[start], lines[start + 1 :]
    blocks = [Block("heading", sheet.title, level=1, location=location)]
    # The first block also carries the title lines above the header; each later block
    # repeats only the header.
    chunk = [*preamble, header]
    for line in body:
        if len(chunk) == ROWS_PER_BLOCK:
            blocks.append(Block("table", "\n".join(chunk), location=location))
            chunk = [header]
        chunk.append(line)
    blocks.append(Block("table", "\n".join(chunk), location=location))
    return blocks


def _header_index(rows: list[list[str]]) -> int:
    """Return the index of the column-header row: the first row about as wide as the table.

    Sheets often open with a title row or two (「出張旅費規程 別表1」) above the real header.
    """
    filled = [sum(1 for value in row if value) for row in rows]
    wide = max(2, (max(filled) + 1) // 2)
    return next((i for i, count in enumerate(filled[:_HEADER_SEARCH_ROWS]) if count >= wide), 0)


def _rows(sheet: ReadOnlyWorksheet, budget: _CellBudget) -> Iterator[list[str]]:
    """Yield the sheet's non-empty rows as cell texts."""
    # Producers often write a wrong <dimension>; trust only the cells actually stored.
    sheet.reset_dimensions()
    for number, row in enumerate(sheet.iter_rows(values_only=True), start=1):
        budget.spend(len(row), sheet.title, number)
        texts = [_cell_text(value) for value in row]
        if any(texts):
            yield texts


def _cell_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0, 0):
            return value.date().isoformat()
        return value.isoformat(sep=" ", timespec="minutes")
    if isinstance(value, dt.time):
        return value.isoformat(timespec="minutes")
    if isinstance(value, dt.date | dt.timedelta):
        return str(value)
    return str(value).strip()
