"""Excel workbooks (openpyxl, read-only): per sheet a heading and its rows as standalone tables,
each value as its number format shows it, and the sheet's table kept as cells."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING

import openpyxl

from kb_pipeline.parsing.model import Block, ParsedDocument, ParseError, Table
from kb_pipeline.parsing.number_formats import shown
from kb_pipeline.parsing.ooxml import check_package
from kb_pipeline.parsing.sheets import sheet_blocks
from kb_pipeline.parsing.titles import meaningful_title

if TYPE_CHECKING:
    from openpyxl.worksheet._read_only import ReadOnlyWorksheet

__all__ = ["MAX_CELLS", "parse_xlsx"]

MIME = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
# Beyond this a workbook is a data dump, not a document; fail precisely instead of
# holding millions of cells in memory.
MAX_CELLS = 200_000


def parse_xlsx(data: bytes, stem: str) -> ParsedDocument:
    """Return each sheet as a level-1 heading followed by table blocks of its non-empty rows."""
    check_package(data, "XLSX", "spreadsheetml.sheet")
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many types on malformed packages
        raise ParseError(f"not a readable XLSX workbook: {type(exc).__name__}: {exc}") from exc
    try:
        blocks: list[Block] = []
        tables: list[Table] = []
        budget = _CellBudget()
        for sheet in workbook.worksheets:
            try:
                sheet_blocks, table = _sheet_blocks(sheet, budget)
                blocks.extend(sheet_blocks)
                tables.extend([table] if table else [])
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
    return ParsedDocument(title=title, mime=MIME, blocks=blocks, tables=tables)


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


def _sheet_blocks(sheet: ReadOnlyWorksheet, budget: _CellBudget
                  ) -> tuple[list[Block], Table | None]:
    """The sheet's heading and table blocks, and its table as cells (None if it is no table)."""
    rows = list(_rows(sheet, budget))
    if not rows:
        return [], None
    return sheet_blocks(rows, sheet.title, f"シート: {sheet.title}")


def _rows(sheet: ReadOnlyWorksheet, budget: _CellBudget) -> Iterator[list[str]]:
    """Yield the sheet's non-empty rows as cell texts."""
    # Producers often write a wrong <dimension>; trust only the cells actually stored.
    sheet.reset_dimensions()
    for number, row in enumerate(sheet.iter_rows(), start=1):
        budget.spend(len(row), sheet.title, number)
        texts = [_cell_text(getattr(cell, "value", None), getattr(cell, "number_format", None))
                 for cell in row]
        if any(texts):
            yield texts


def _cell_text(value: object, number_format: str | None) -> str:
    """The cell as the workbook shows it: its number format applied where this reader renders
    it, else the value written plainly."""
    if value is None:
        return ""
    if (formatted := shown(value, number_format)) is not None:
        return formatted
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
