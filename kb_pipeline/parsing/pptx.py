"""PowerPoint decks (python-pptx): per slide its title, text, tables and speaker notes."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import TYPE_CHECKING

import pptx
from pptx.enum.shapes import PP_PLACEHOLDER
from pptx.shapes.group import GroupShape

from kb_pipeline.parsing.blocks import render_row
from kb_pipeline.parsing.cjk import join_line_breaks
from kb_pipeline.parsing.model import Block, ParsedDocument, ParseError, Table
from kb_pipeline.parsing.ooxml import check_package
from kb_pipeline.parsing.table_cells import read_table
from kb_pipeline.parsing.titles import first_heading, meaningful_title

if TYPE_CHECKING:
    from pptx.shapes.base import BaseShape
    from pptx.slide import Slide
    from pptx.text.text import TextFrame

__all__ = ["parse_pptx"]

MIME = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
SLIDE_TITLE_LEVEL = 2
_FURNITURE = frozenset({PP_PLACEHOLDER.SLIDE_NUMBER, PP_PLACEHOLDER.DATE, PP_PLACEHOLDER.FOOTER})


def parse_pptx(data: bytes, stem: str) -> ParsedDocument:
    """Return each slide's title as a heading, then its text, tables and notes, located by slide."""
    check_package(data, "PPTX", "presentationml.presentation.main")
    try:
        presentation = pptx.Presentation(io.BytesIO(data))
    except Exception as exc:  # python-pptx and lxml raise many types on malformed packages
        raise ParseError(f"not a readable PPTX presentation: {type(exc).__name__}: {exc}") from exc
    blocks: list[Block] = []
    tables: list[Table] = []
    for number, slide in enumerate(presentation.slides, start=1):
        try:
            blocks.extend(_slide_blocks(slide, f"スライド {number}", tables))
        except Exception as exc:  # malformed slide XML surfaces while shapes are read
            problem = f"{type(exc).__name__}: {exc}"
            raise ParseError(f"slide {number} could not be read: {problem}") from exc
    title = meaningful_title(presentation.core_properties.title) or first_heading(blocks) or stem
    return ParsedDocument(title=title, mime=MIME, blocks=blocks, tables=tables)


def _slide_blocks(slide: Slide, location: str, tables: list[Table]) -> list[Block]:
    """The slide's blocks in reading order; its tables, as cells, are added to `tables`."""
    blocks = []
    title_shape = slide.shapes.title
    title_id = title_shape.shape_id if title_shape is not None else None
    if title_shape is not None and title_shape.has_text_frame:
        title = join_line_breaks(title_shape.text_frame.text)
        if title:
            blocks.append(Block("heading", title, level=SLIDE_TITLE_LEVEL, location=location))
    for shape in _reading_order(slide.shapes):
        if shape.shape_id == title_id or _is_slide_furniture(shape):
            continue
        if shape.has_table:
            rows = [
                render_row(cell.text for cell in row.cells if not cell.is_spanned)
                for row in shape.table.rows
            ]
            text = "\n".join(row for row in rows if row.strip(" |"))
            if text:
                blocks.append(Block("table", text, location=location))
            # A spanned cell is left empty, for the header's merged text to spread over.
            cells = [["" if cell.is_spanned else cell.text for cell in row.cells]
                     for row in shape.table.rows]
            if (table := read_table(cells, location=location)) is not None:
                tables.append(table)
        elif shape.has_text_frame:
            text = _frame_text(shape.text_frame)
            if text:
                blocks.append(Block("paragraph", text, location=location))
    if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
        notes = _frame_text(slide.notes_slide.notes_text_frame)
        if notes:
            blocks.append(Block("paragraph", notes, location=location))
    return blocks


def _is_slide_furniture(shape: BaseShape) -> bool:
    """Slide numbers, dates and footers repeat on every slide and say nothing about it."""
    return shape.is_placeholder and shape.placeholder_format.type in _FURNITURE


def _reading_order(shapes: Iterable[BaseShape]) -> list[BaseShape]:
    """Return the shapes, group members in their group's place, top to bottom and left to right.

    The XML keeps shapes in drawing (z) order, which follows editing history, not reading.
    """
    ordered: list[BaseShape] = []
    stack = [iter(_by_position(shapes))]  # not recursion: groups can nest arbitrarily deep
    while stack:
        shape = next(stack[-1], None)
        if shape is None:
            stack.pop()
        elif isinstance(shape, GroupShape):
            stack.append(iter(_by_position(shape.shapes)))
        else:
            ordered.append(shape)
    return ordered


def _by_position(shapes: Iterable[BaseShape]) -> list[BaseShape]:
    return sorted(shapes, key=lambda shape: (shape.top or 0, shape.left or 0))


def _frame_text(frame: TextFrame) -> str:
    lines = (paragraph.text.rstrip() for paragraph in frame.paragraphs)
    return "\n".join(line for line in lines if line.strip())
