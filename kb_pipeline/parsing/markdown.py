"""Markdown: ATX and setext headings, pipe tables, paragraphs; front matter and fences handled."""

from __future__ import annotations

import re

from kb_pipeline.parsing.blocks import BlockBuilder
from kb_pipeline.parsing.cjk import join_line_breaks
from kb_pipeline.parsing.encoding import decode_text
from kb_pipeline.parsing.model import Block, ParsedDocument
from kb_pipeline.parsing.table_cells import is_note
from kb_pipeline.parsing.titles import first_heading

__all__ = ["parse_markdown"]

_ATX = re.compile(r" {0,3}(?P<marks>#{1,6})(?:[ \t](?P<text>.*))?")
_SETEXT = re.compile(r" {0,3}(?P<marks>=+|-+)[ \t]*")
_FENCE = re.compile(r" {0,3}(?P<fence>`{3,}|~{3,})")
_DELIMITER_CELL = re.compile(r":?-+:?")
_FRONT_MATTER_CLOSE = {"---": ("---", "..."), "+++": ("+++",)}
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")
_LIST_OR_QUOTE = re.compile(r" {0,3}(?:[-*+>]|[0-9]{1,9}[.)])(?:[ \t]|$)")


def parse_markdown(data: bytes, stem: str, *, suffix: str = ".md") -> ParsedDocument:
    """Return a Markdown file's headings, tables and paragraphs in order."""
    lines = decode_text(data, suffix).split("\n")
    builder = BlockBuilder(detect_headings=False)
    i = _skip_front_matter(lines)
    while i < len(lines):
        i = _consume(lines, i, builder)
    blocks = builder.finish()
    return ParsedDocument(
        title=first_heading(blocks, level=1) or stem, mime="text/markdown", blocks=blocks,
        tables=builder.tables,
    )


def _consume(lines: list[str], i: int, builder: BlockBuilder) -> int:
    """Add the construct starting at line `i` to `builder`; return the index after it."""
    line = lines[i]
    if fence := _FENCE.match(line):
        return _consume_fence(lines, i, fence["fence"], builder)
    if atx := _ATX.fullmatch(line):
        text = _without_closing_marks((atx["text"] or "").strip())
        if text:
            builder.add_block(Block("heading", text, level=len(atx["marks"])))
        else:
            builder.end_paragraph()
        return i + 1
    if setext := _SETEXT.fullmatch(line):
        paragraph = builder.pop_paragraph()
        if paragraph and not any(_LIST_OR_QUOTE.match(text) for text in paragraph):
            level = 1 if setext["marks"][0] == "=" else 2
            builder.add_block(Block("heading", join_line_breaks("\n".join(paragraph)), level=level))
            return i + 1
        for text in paragraph:  # a list or quote above: the underline is a thematic break
            builder.add_line(text)
        if setext["marks"][0] == "=":
            builder.add_line(line)
        else:
            builder.end_paragraph()
        return i + 1
    if line.lstrip().startswith("<!--"):
        return _skip_comment(lines, i)
    if "|" in line and i + 1 < len(lines) and _is_delimiter_row(lines[i + 1]):
        return _consume_table(lines, i, builder)
    builder.add_line(line)
    return i + 1


def _skip_comment(lines: list[str], i: int) -> int:
    end = i
    while end < len(lines) and "-->" not in lines[end]:
        end += 1
    return end + 1


def _without_closing_marks(text: str) -> str:
    """「## 総則 ##」 → 「総則」: closing #s go only when a space separates them from the text."""
    bare = text.rstrip("#")
    if bare != text and (not bare or bare[-1] in " \t"):
        return bare.strip()
    return text


def _is_delimiter_row(line: str) -> bool:
    """Whether `line` is a pipe table's |---|:---:| row."""
    cells = line.strip().removeprefix("|").removesuffix("|").split("|")
    return "-" in line and all(_DELIMITER_CELL.fullmatch(cell.strip()) for cell in cells)


def _consume_fence(lines: list[str], i: int, fence: str, builder: BlockBuilder) -> int:
    end = i + 1
    while end < len(lines) and not lines[end].strip().startswith(fence):
        end += 1
    code = "\n".join(line.rstrip() for line in lines[i + 1 : end]).strip("\n")
    if code.strip():
        builder.add_block(Block("paragraph", code))
    else:
        builder.end_paragraph()
    return end + 1


def _consume_table(lines: list[str], i: int, builder: BlockBuilder) -> int:
    rows = [_cells(lines[i])]
    end = i + 2  # the delimiter row carries no text
    while end < len(lines) and "|" in lines[end] and lines[end].strip():
        rows.append(_cells(lines[end]))
        end += 1
    builder.add_table(rows, notes=_notes_after(lines, end))
    return end


def _notes_after(lines: list[str], end: int) -> list[str]:
    """The notes written under a table (「注1 …」「※ …」), blank lines before them allowed."""
    i = end
    while i < len(lines) and not lines[i].strip():
        i += 1
    notes = []
    while i < len(lines) and lines[i].strip() and is_note(lines[i]):
        notes.append(lines[i].strip())
        i += 1
    return notes


def _cells(line: str) -> list[str]:
    line = line.strip()
    line = line.removeprefix("|")
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    return [cell.strip().replace("\\|", "|") for cell in _UNESCAPED_PIPE.split(line)]


def _skip_front_matter(lines: list[str]) -> int:
    closers = _FRONT_MATTER_CLOSE.get(lines[0].strip()) if lines else None
    if closers:
        for j in range(1, len(lines)):
            if lines[j].strip() in closers:
                return j + 1
    return 0
