"""Offline parsing of company documents into `ParsedDocument`: text, headings, tables, pages.

`parse_document(name, data)` picks the parser by the file's suffix and raises `ParseError`
with a precise English message for anything it cannot parse; no library exception escapes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import partial
from pathlib import PurePosixPath, PureWindowsPath

import msgspec

from kb_pipeline.parsing.docx import parse_docx
from kb_pipeline.parsing.html import parse_html
from kb_pipeline.parsing.markdown import parse_markdown
from kb_pipeline.parsing.model import Block, ParsedDocument, ParseError
from kb_pipeline.parsing.pdf import parse_pdf
from kb_pipeline.parsing.pptx import parse_pptx
from kb_pipeline.parsing.revision import find_revision_date
from kb_pipeline.parsing.text import parse_text
from kb_pipeline.parsing.xlsx import parse_xlsx

__all__ = [
    "PARSER_VERSION",
    "SUPPORTED_SUFFIXES",
    "Block",
    "ParseError",
    "ParsedDocument",
    "find_revision_date",
    "parse_document",
]

# Part of the pipeline version: bump whenever any parser's output changes.
PARSER_VERSION = "1"

_PARSERS: dict[str, Callable[[bytes, str], ParsedDocument]] = {
    ".md": partial(parse_markdown, suffix=".md"),
    ".markdown": partial(parse_markdown, suffix=".markdown"),
    ".txt": partial(parse_text, suffix=".txt"),
    ".html": partial(parse_html, suffix=".html"),
    ".htm": partial(parse_html, suffix=".htm"),
    ".pdf": parse_pdf,
    ".docx": parse_docx,
    ".xlsx": parse_xlsx,
    ".pptx": parse_pptx,
}
SUPPORTED_SUFFIXES: frozenset[str] = frozenset(_PARSERS)


def parse_document(name: str, data: bytes, modified: dt.date | None = None) -> ParsedDocument:
    """Return the parsed form of the file `name` holding `data`.

    The suffix of `name` (any case) chooses the parser. `revision_date` is the date the text
    states (改定日, 施行日 …), else `modified`.
    """
    path = PureWindowsPath(name) if "\\" in name else PurePosixPath(name)
    suffix, stem = path.suffix.lower(), path.stem or path.name
    parser = _PARSERS.get(suffix)
    if parser is None:
        raise ParseError(f"unsupported file type '{suffix}'" if suffix else "file has no extension")
    if not data:
        raise ParseError("file is empty")
    try:
        document = parser(bytes(data), stem)
    except ParseError:
        raise
    except RecursionError as exc:
        raise ParseError(f"{suffix} document is nested too deeply to parse") from exc
    except Exception as exc:
        # Library failures the format modules did not anticipate still become a reported,
        # per-file failure instead of crashing the run.
        raise ParseError(f"{suffix} parser failed: {type(exc).__name__}: {exc}") from exc
    if not any(block.text.strip() for block in document.blocks):
        raise ParseError("document contains no text")
    text = "\n".join(block.text for block in document.blocks)
    return msgspec.structs.replace(document, revision_date=find_revision_date(text) or modified)
