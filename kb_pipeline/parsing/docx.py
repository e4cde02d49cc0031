"""Word documents (python-docx): styled headings, paragraphs and tables in body order."""

from __future__ import annotations

import io
import re

import docx
from docx.table import Table
from docx.text.paragraph import Paragraph

from kb_pipeline.parsing.blocks import BlockBuilder
from kb_pipeline.parsing.cjk import join_line_breaks
from kb_pipeline.parsing.model import Block, ParsedDocument, ParseError
from kb_pipeline.parsing.ooxml import check_package
from kb_pipeline.parsing.titles import first_heading, meaningful_title

__all__ = ["parse_docx"]

MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
_HEADING_STYLE = re.compile(r"(?i)(?:heading|見出し)\s*([1-9])")
_TITLE_STYLES = frozenset({"title", "表題", "タイトル"})
_BODY_OUTLINE_LEVEL = 9


def parse_docx(data: bytes, stem: str) -> ParsedDocument:
    """Return a Word document's headings, paragraphs and tables in the order they appear."""
    check_package(data, "DOCX", "wordprocessingml.document.main")
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx and lxml raise many types on malformed packages
        raise ParseError(f"not a readable DOCX document: {type(exc).__name__}: {exc}") from exc
    # Word documents rarely use numbered-heading wording as plain text headings; 第N条 they do.
    builder = BlockBuilder(numbered_headings=False)
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            rows, cells = _table_rows(item)
            builder.add_table(rows, cells=cells)
            continue
        text = item.text.rstrip()
        if not text.strip():
            continue
        level = _heading_level(item)
        if level is not None:
            builder.add_block(Block("heading", join_line_breaks(text), level=level))
        else:
            for line in text.split("\n"):
                builder.add_line(line)
            builder.end_paragraph()
    blocks = builder.finish()
    title = meaningful_title(document.core_properties.title) or first_heading(blocks) or stem
    return ParsedDocument(title=title, mime=MIME, blocks=blocks, tables=builder.tables)


def _heading_level(paragraph: Paragraph) -> int | None:
    """Heading N / 見出し N / Title styles, else an outline level of the paragraph or its style."""
    styles = []
    style = paragraph.style
    while style is not None:
        styles.append(style)
        style = style.base_style
    for style in styles:
        name = (style.name or "").strip()
        if match := _HEADING_STYLE.fullmatch(name):
            return int(match[1])
        if name.lower() in _TITLE_STYLES:
            return 1
    # Custom styles such as 「章タイトル」 make headings through w:outlineLvl (0 = level 1);
    # the paragraph's own setting overrides its style's.
    for element in (paragraph._p, *(style.element for style in styles)):
        values = element.xpath("./w:pPr/w:outlineLvl/@w:val")
        if values and str(values[0]).isdigit():
            value = int(values[0])
            return value + 1 if value < _BODY_OUTLINE_LEVEL else None
    return None


def _table_rows(table: Table) -> tuple[list[list[str]], list[list[str]]]:
    """The table's rows as text (a merged cell once) and as cells (a merged cell's text in every
    grid column it spans, as python-docx gives it)."""
    rows, cells = [], []
    for row in table.rows:
        spread = [cell.text for cell in row.cells]
        once, seen = [], set()
        for cell, text in zip(row.cells, spread, strict=True):
            if cell._tc not in seen:  # a merged cell repeats once per grid column it spans
                seen.add(cell._tc)
                once.append(text)
        rows.append(once)
        cells.append(spread)
    return rows, cells
