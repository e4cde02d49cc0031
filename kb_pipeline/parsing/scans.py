"""Scans: image files as documents of their own, and the text OCR read on a page turned into
the lines a parser takes (Japanese set without the spaces OCR puts between characters; a row
of cells where the engine kept a table's columns apart)."""

from __future__ import annotations

import re

from kb_pipeline.ocr import PageReader, image_pages
from kb_pipeline.ocr.engine import OcrResult
from kb_pipeline.parsing.blocks import BlockBuilder, render_row
from kb_pipeline.parsing.cjk import is_cjk
from kb_pipeline.parsing.model import Block, NoTextFound, ParsedDocument, ParseError
from kb_pipeline.parsing.titles import MAX_TITLE_CHARS
from kb_pipeline.parsing.wrapped import join_wrapped_lines

__all__ = ["add_scanned_lines", "page_lines", "parse_image"]

# The engine sets three spaces between the stretches of a row parted by a wide blank gap, a
# table's cells (kb_pipeline.ocr.lines); fewer are a word space, or noise between Japanese
# characters.
_CELL_GAP = re.compile(r" {3,}|\t")
_CELL = " | "  # between the cells of a row (render_row)
_SPACES = re.compile(r"(?<=(.)) +(?=(.))")
# 縦書き sets a decimal point as a middle dot (JIS X 4051): 66・5kg is 66.5kg, as typed text has it.
_VERTICAL_DECIMAL = re.compile(r"(?<=\d)[・･·](?=\d)")
_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".tif": "image/tiff",
         ".tiff": "image/tiff", ".webp": "image/webp", ".bmp": "image/bmp"}


def parse_image(data: bytes, stem: str, scans: PageReader | None, *, suffix: str
                ) -> ParsedDocument:
    """An image file's text as OCR read it, page by page ("p.2" of a multi-page TIFF)."""
    if scans is None:
        raise ParseError("image files are read by OCR, and this parse has no OCR reader")
    readings = scans.read(image_pages(data, suffix, scans.limits))
    builder = BlockBuilder()
    for number, reading in sorted(readings.items()):
        builder.end_paragraph()
        builder.location = f"p.{number}"
        add_scanned_lines(builder, page_lines(reading))
    blocks = builder.finish()
    if not blocks:
        pages = f"{len(readings)} page" + ("" if len(readings) == 1 else "s")
        raise NoTextFound(f"no text found by OCR ({pages})")
    first = blocks[0].text.split("\n", 1)[0].strip()
    return ParsedDocument(
        title=first if 0 < len(first) <= MAX_TITLE_CHARS else stem, mime=_MIME[suffix],
        blocks=blocks, ocr_locations=sorted({b.location for b in blocks if b.location}))


def add_scanned_lines(builder: BlockBuilder, lines: list[str]) -> None:
    """A page's lines as OCR read them: wrapped lines joined back, and consecutive rows of cells
    made one table (read row by row under its header, as every parser's tables are)."""
    rows: list[str] = []
    for line in [*join_wrapped_lines(lines), ""]:
        if _CELL in line:
            rows.append(line)
            continue
        if len(rows) > 1:
            builder.add_block(Block("table", "\n".join(rows), location=builder.location))
        elif rows:
            builder.add_line(rows[0])
        rows = []
        builder.add_line(line)


def page_lines(result: OcrResult) -> list[str]:
    """The page's lines, a blank one between paragraphs; a row of cells as " | "-separated
    cells (the form every parser gives a table row); a 縦書き decimal point as typed text's."""
    lines = []
    for raw in result.text.replace("\f", "").splitlines():
        # A gap in a 縦書き column is a misread stretch, not a cell boundary.
        parts = [_VERTICAL_DECIMAL.sub(".", raw)] if result.vertical else _CELL_GAP.split(
            raw.strip())
        cells = [_words(cell) for cell in parts]
        cells = [cell for cell in cells if cell]
        lines.append(render_row(cells) if len(cells) > 1 else (cells[0] if cells else ""))
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _words(text: str) -> str:
    """`text` with single spaces between Latin words only: a space beside a Japanese character
    is the engine's, not the writer's (「従業員 は」→「従業員は」)."""
    def space(match: re.Match[str]) -> str:
        return "" if is_cjk(match[1]) or is_cjk(match[2]) else " "

    return _SPACES.sub(space, text.strip())
