"""Offline parsing of company documents into `ParsedDocument`: text, headings, tables, pages.

`parse_document(name, data)` picks the parser by the file's suffix and raises `ParseError`
with a precise English message for anything it cannot parse; no library exception escapes.
Scanned pages and image files are read through the `scans` reader it is given (kb_pipeline.ocr);
a document whose pages that reader has not read yet raises `AwaitingOcr`.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Callable
from functools import partial
from pathlib import PurePosixPath, PureWindowsPath

import msgspec

from kb_pipeline.ocr import IMAGE_SUFFIXES, AwaitingOcr, OcrError, PageReader
from kb_pipeline.parsing.delimited import parse_delimited
from kb_pipeline.parsing.docx import parse_docx
from kb_pipeline.parsing.html import parse_html
from kb_pipeline.parsing.markdown import parse_markdown
from kb_pipeline.parsing.model import Block, NoTextFound, ParsedDocument, ParseError, Table
from kb_pipeline.parsing.pdf import parse_pdf
from kb_pipeline.parsing.pptx import parse_pptx
from kb_pipeline.parsing.revision import find_revision_date
from kb_pipeline.parsing.scans import parse_image
from kb_pipeline.parsing.text import parse_text
from kb_pipeline.parsing.xlsx import parse_xlsx

__all__ = [
    "PARSER_VERSION",
    "SUPPORTED_SUFFIXES",
    "Block",
    "NoTextFound",
    "ParseError",
    "ParsedDocument",
    "Table",
    "find_revision_date",
    "parse_document",
]

# Part of the pipeline version: bump whenever any parser's output changes.
# 2: titles taken from file names are NFC-normalized (decomposed names saved from Macs).
# 3: scanned PDF pages and image files are read by OCR.
# 4: OCR's lines read again by PP-OCR's recognizer; a 縦書き decimal point typed as "."
# 5: workbook values as their number formats show them (5%, 39,800); tables kept as cells too;
#    CSV and TSV files read.
PARSER_VERSION = "5"

_PARSERS: dict[str, Callable[[bytes, str], ParsedDocument]] = {
    ".md": partial(parse_markdown, suffix=".md"),
    ".markdown": partial(parse_markdown, suffix=".markdown"),
    ".txt": partial(parse_text, suffix=".txt"),
    ".html": partial(parse_html, suffix=".html"),
    ".htm": partial(parse_html, suffix=".htm"),
    ".docx": parse_docx,
    ".xlsx": parse_xlsx,
    ".csv": partial(parse_delimited, suffix=".csv"),
    ".tsv": partial(parse_delimited, suffix=".tsv"),
    ".pptx": parse_pptx,
}
# Formats that may hold scanned pages: their parsers take the OCR reader too.
_SCAN_PARSERS: dict[str, Callable[[bytes, str, PageReader | None], ParsedDocument]] = {
    ".pdf": parse_pdf,
    **{suffix: partial(parse_image, suffix=suffix) for suffix in IMAGE_SUFFIXES},
}
SUPPORTED_SUFFIXES: frozenset[str] = frozenset(_PARSERS) | frozenset(_SCAN_PARSERS)

# What PostgreSQL text and JSON cannot carry: NUL (jsonb and text refuse it) and lone surrogates
# (not encodable as UTF-8). A PDF whose ToUnicode map points glyphs at U+0000 or U+D800 yields
# them; left in, they failed the whole run when the parse was saved, not just this document.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def parse_document(name: str, data: bytes, modified: dt.date | None = None,
                   scans: PageReader | None = None) -> ParsedDocument:
    """Return the parsed form of the file `name` holding `data`.

    The suffix of `name` (any case) chooses the parser. `revision_date` is the date the text
    states (改定日, 施行日 …), else `modified`. `scans` reads scanned pages and image files.
    """
    path = PureWindowsPath(name) if "\\" in name else PurePosixPath(name)
    suffix = path.suffix.lower()
    # A name saved from a Mac is decomposed (「カ\u3099イト\u3099」); as a title it must read and
    # match like the composed form people type.
    stem = unicodedata.normalize("NFC", path.stem or path.name)
    parser = _PARSERS.get(suffix)
    scan_parser = _SCAN_PARSERS.get(suffix)
    if parser is None and scan_parser is None:
        raise ParseError(f"unsupported file type '{suffix}'" if suffix else "file has no extension")
    if not data:
        raise ParseError("file is empty")
    try:
        document = (parser(bytes(data), stem) if parser is not None
                    else scan_parser(bytes(data), stem, scans))
    except (ParseError, AwaitingOcr):
        raise
    except OcrError as exc:
        raise ParseError(str(exc)) from exc
    except RecursionError as exc:
        raise ParseError(f"{suffix} document is nested too deeply to parse") from exc
    except Exception as exc:
        # Library failures the format modules did not anticipate still become a reported,
        # per-file failure instead of crashing the run.
        raise ParseError(f"{suffix} parser failed: {type(exc).__name__}: {exc}") from exc
    document = _storable(document)
    if not any(block.text.strip() for block in document.blocks):
        raise ParseError("document contains no text")
    text = "\n".join(block.text for block in document.blocks)
    return msgspec.structs.replace(document, revision_date=find_revision_date(text) or modified)


def _storable(document: ParsedDocument) -> ParsedDocument:
    """Return `document` without NUL characters, and with lone surrogates as U+FFFD.

    No document indexed before could contain either (saving it failed), so this changes no
    indexed output and needs no PARSER_VERSION bump of its own.
    """

    def clean(text: str) -> str:
        return _UNSTORABLE.sub(lambda m: "" if m[0] == "\x00" else "\ufffd", text)

    texts = [document.title, *(b.text for b in document.blocks),
             *(b.location or "" for b in document.blocks),
             *(text for t in document.tables
               for text in (t.caption, *t.columns, *t.notes, *(c for r in t.rows for c in r)))]
    if not any(_UNSTORABLE.search(text) for text in texts):
        return document
    blocks = [
        msgspec.structs.replace(
            b, text=clean(b.text), location=clean(b.location) if b.location else b.location
        )
        for b in document.blocks
    ]
    tables = [
        msgspec.structs.replace(
            t, caption=clean(t.caption), columns=[clean(c) for c in t.columns],
            notes=[clean(n) for n in t.notes], rows=[[clean(c) for c in r] for r in t.rows])
        for t in document.tables
    ]
    return msgspec.structs.replace(document, title=clean(document.title), blocks=blocks,
                                   tables=tables)
