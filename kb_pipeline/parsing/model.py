"""The parsed form of one document: ordered blocks that keep headings, tables and their origin."""

from __future__ import annotations

import datetime as dt
from typing import Literal

import msgspec

__all__ = ["Block", "NoTextFound", "ParseError", "ParsedDocument", "Table"]

BlockKind = Literal["heading", "paragraph", "table"]


class Block(msgspec.Struct, frozen=True):
    """One structural unit of a document, in reading order.

    `location` names where the block came from so a citation can point at it:
    "p.3" for a PDF page, "シート: 売上" for a workbook sheet, "スライド 2" for a slide,
    None for formats without pages.
    """

    kind: BlockKind
    text: str
    level: int = 0
    location: str | None = None


class Table(msgspec.Struct, frozen=True):
    """A table kept as its cells, beside the text of its blocks, so a question about one cell,
    the largest value of a column or the rows meeting a condition is answered from the cells.

    `columns` names each column by its header rows joined top-down (「日当：管理職」), a merged
    header cell spread over the columns it spans; `units` is each column's unit (from its
    header 「最大推力 (N)」, else the table's 「（単位：円）」); `rows` are the data rows only
    (not a note, not a total, not blank), each as wide as `columns`, every value as the
    document shows it (5%, 39,800). `caption` holds the lines above the header, `notes` those
    under it (注1 …), `location` the block's location.
    """

    columns: list[str]
    units: list[str | None]
    rows: list[list[str]]
    caption: str = ""
    notes: list[str] = msgspec.field(default_factory=list)
    location: str | None = None


class ParsedDocument(msgspec.Struct, frozen=True):
    """A document's text and structure; `revision_date` is the date the document states, if any."""

    title: str
    mime: str
    blocks: list[Block]
    revision_date: dt.date | None = None
    ocr_locations: list[str] = msgspec.field(default_factory=list)  # pages OCR read ("p.2")
    tables: list[Table] = msgspec.field(default_factory=list)  # in reading order


class ParseError(Exception):
    """A file that cannot be parsed; the message says precisely why, for the failures table."""


class NoTextFound(ParseError):
    """A scan where OCR found no text on any page: skipped, and said so, but no error."""
