"""Plain text, as Japanese regulations are often kept: 第N章/第N条 lines mark the structure."""

from __future__ import annotations

from kb_pipeline.parsing.blocks import BlockBuilder
from kb_pipeline.parsing.encoding import decode_text
from kb_pipeline.parsing.model import ParsedDocument
from kb_pipeline.parsing.titles import MAX_TITLE_CHARS

__all__ = ["parse_text"]


def parse_text(data: bytes, stem: str, *, suffix: str = ".txt") -> ParsedDocument:
    """Return a plain-text file's paragraphs and the headings its wording marks."""
    lines = decode_text(data, suffix).split("\n")
    builder = BlockBuilder()
    for line in lines:
        builder.add_line(line)
    # Decorative rules 「━━━━」 often frame the title line.
    first_line = next((line.strip() for line in lines if any(ch.isalnum() for ch in line)), "")
    title = first_line if len(first_line) <= MAX_TITLE_CHARS else ""
    return ParsedDocument(title=title or stem, mime="text/plain", blocks=builder.finish())
