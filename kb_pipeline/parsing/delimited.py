"""CSV and TSV files, as companies export lists from their systems: the grid read like a sheet
(kb_pipeline/parsing/sheets.py), in whatever encoding it was saved (UTF-8 with or without a BOM,
Shift_JIS from Excel)."""

from __future__ import annotations

import csv
import io

from kb_pipeline.parsing.encoding import decode_text
from kb_pipeline.parsing.model import ParsedDocument, ParseError
from kb_pipeline.parsing.sheets import sheet_blocks

__all__ = ["MAX_CELLS", "parse_delimited"]

# Beyond this a file is a data dump, not a document (the workbooks' limit).
MAX_CELLS = 200_000
_MIMES = {".csv": "text/csv", ".tsv": "text/tab-separated-values"}


def parse_delimited(data: bytes, stem: str, *, suffix: str = ".csv") -> ParsedDocument:
    """Return the file's rows as one table under its name, and the table as cells."""
    text = decode_text(data, suffix)
    delimiter = "\t" if suffix == ".tsv" else _delimiter(text)
    rows, cells = [], 0
    for number, row in enumerate(csv.reader(io.StringIO(text), delimiter=delimiter), start=1):
        cells += len(row)
        if cells > MAX_CELLS:
            raise ParseError(f"file too large: more than {MAX_CELLS:,} cells (at line {number})")
        row = [cell.strip() for cell in row]
        if any(row):
            rows.append(row)
    if not rows:
        raise ParseError(f"{suffix} file has no non-empty cells")
    blocks, table = sheet_blocks(rows, stem, None)
    return ParsedDocument(title=stem, mime=_MIMES[suffix], blocks=blocks,
                          tables=[table] if table else [])


def _delimiter(text: str) -> str:
    """The delimiter of a .csv file: a comma, unless its first lines are cut by tabs or
    semicolons (European Excel) instead."""
    head = text[:8192]
    try:
        return csv.Sniffer().sniff(head, delimiters=",\t;").delimiter
    except csv.Error:
        return ","
