"""Where each table's rows lie among a document's passages: a row is cited, highlighted and
permissioned through the passage whose text holds it."""

from __future__ import annotations

from typing import Any

from kb_pipeline.chunking import Chunk
from kb_pipeline.parsing import Table

__all__ = ["placed_tables"]


def placed_tables(tables: list[Table], chunks: list[Chunk]) -> list[dict[str, Any]]:
    """The tables as search_index stores them (sql/026_tables.sql), each row with the index of
    the first passage from the previous row's on whose line holds every cell of the row (a row
    cut across passages, which no line holds whole, stays with the previous row's passage).
    Tables and passages are both in reading order, so the search only moves forward."""
    lines = [[_squeezed(line) for line in chunk.content.splitlines()] for chunk in chunks]
    placed, cursor = [], 0
    for number, table in enumerate(tables):
        rows = []
        for row_no, cells in enumerate(table.rows):
            cursor = _holder(lines, cursor, [_squeezed(c) for c in cells if c.strip()])
            rows.append({"row_no": row_no, "chunk_index": chunks[cursor].index, "cells": cells})
        placed.append({
            "table_no": number, "chunk_index": rows[0]["chunk_index"],
            "location": table.location, "caption": table.caption, "columns": table.columns,
            "units": table.units, "notes": table.notes, "rows": rows,
        })
    return placed


def _holder(lines: list[list[str]], start: int, cells: list[str]) -> int:
    for index in range(start, len(lines)):
        if any(all(cell in line for cell in cells) for line in lines[index]):
            return index
    return start


def _squeezed(text: str) -> str:
    return "".join(text.split())
