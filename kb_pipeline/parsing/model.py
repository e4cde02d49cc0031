"""The parsed form of one document: ordered blocks that keep headings, tables and their origin."""

from __future__ import annotations

import datetime as dt
from typing import Literal

import msgspec

__all__ = ["Block", "NoTextFound", "ParseError", "ParsedDocument"]

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


class ParsedDocument(msgspec.Struct, frozen=True):
    """A document's text and structure; `revision_date` is the date the document states, if any."""

    title: str
    mime: str
    blocks: list[Block]
    revision_date: dt.date | None = None
    ocr_locations: list[str] = msgspec.field(default_factory=list)  # pages OCR read ("p.2")


class ParseError(Exception):
    """A file that cannot be parsed; the message says precisely why, for the failures table."""


class NoTextFound(ParseError):
    """A scan where OCR found no text on any page: skipped, and said so, but no error."""
