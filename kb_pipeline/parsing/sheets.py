"""A grid of cells laid out as a sheet (a worksheet, a CSV file): its heading, its rows as table
blocks that each stand alone, and its table as cells."""

from __future__ import annotations

from kb_pipeline.parsing.blocks import render_row
from kb_pipeline.parsing.model import Block, Table
from kb_pipeline.parsing.table_cells import read_table

__all__ = ["ROWS_PER_BLOCK", "sheet_blocks"]

# Lines per table block, the repeated header row included, so each block stands alone.
ROWS_PER_BLOCK = 40
_HEADER_SEARCH_ROWS = 10


def sheet_blocks(rows: list[list[str]], heading: str, location: str | None
                 ) -> tuple[list[Block], Table | None]:
    """The grid's non-empty `rows` as a level-1 `heading` followed by table blocks, and as a
    table of cells (None if they form none)."""
    # Sheets laid out from column B or C (「Excel方眼紙」) would start every row with " | ".
    offset = min(next(i for i, value in enumerate(row) if value) for row in rows)
    rows = [row[offset:] for row in rows]
    lines = [render_row(row) for row in rows]
    start = _header_index(rows)
    preamble, header, body = lines[:start], lines[start], lines[start + 1 :]
    blocks = [Block("heading", heading, level=1, location=location)]
    # The first block also carries the title lines above the header; each later block
    # repeats only the header.
    chunk = [*preamble, header]
    for line in body:
        if len(chunk) == ROWS_PER_BLOCK:
            blocks.append(Block("table", "\n".join(chunk), location=location))
            chunk = [header]
        chunk.append(line)
    blocks.append(Block("table", "\n".join(chunk), location=location))
    return blocks, read_table(rows, start, location=location)


def _header_index(rows: list[list[str]]) -> int:
    """Return the index of the column-header row: the first row about as wide as the table.

    Sheets often open with a title row or two (「出張旅費規程 別表1」) above the real header.
    """
    filled = [sum(1 for value in row if value) for row in rows]
    wide = max(2, (max(filled) + 1) // 2)
    return next((i for i, count in enumerate(filled[:_HEADER_SEARCH_ROWS]) if count >= wide), 0)
