"""Turning a stream of lines into heading, paragraph and table blocks."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kb_pipeline.parsing.cjk import join_line_breaks
from kb_pipeline.parsing.headings import CAPTION, HeadingMatch, match_heading
from kb_pipeline.parsing.model import Block, Table
from kb_pipeline.parsing.table_cells import read_table

__all__ = ["BlockBuilder", "render_row"]

_STRUCTURAL_LEVEL = {"chapter": 1, "section": 2, "article": 3, "supplementary": 1}
_MAX_LEVEL = 6
_RULE_CHARS = "━─＝=\\-－—―＊*＿_~〜･・."
_RULE = re.compile(rf"[ 　]*[{_RULE_CHARS}]{{3,}}(?:[ 　]+[{_RULE_CHARS}]+)*[ 　]*")


def render_row(cells: Iterable[object]) -> str:
    """Return one table row as a single line of " | "-separated cells, trailing empties dropped.

    Line breaks inside a cell become spaces so that each row stays one line.
    """
    texts = ["" if cell is None else join_line_breaks(str(cell)) for cell in cells]
    while texts and not texts[-1]:
        texts.pop()
    return " | ".join(texts)


class BlockBuilder:
    """Collects lines into paragraphs and recognises Japanese headings written as plain text.

    Consecutive lines form one paragraph until `end_paragraph` (a blank line, or the end of
    a Word paragraph). With `detect_headings`, 第N章/節/条 and 附則 lines become headings, and
    a caption line 「（目的）」 joins the article on the next line: 「第1条（目的）」. With
    `numbered_headings`, short lines like 「1. 目的」「(1) 対象」 become headings too, nested
    below the latest 第N heading, except inside an article, where they number its items.
    """

    def __init__(
        self,
        location: str | None = None,
        *,
        detect_headings: bool = True,
        numbered_headings: bool = True,
    ) -> None:
        self.location = location
        self._detect = detect_headings
        self._numbered = numbered_headings
        self._blocks: list[Block] = []
        self._lines: list[str] = []
        self._caption: str | None = None
        self._base_level = 0
        self.tables: list[Table] = []  # the tables added, as cells

    def add_line(self, line: str) -> None:
        """Add one line of running text; a blank line ends the paragraph."""
        line = line.rstrip()
        if not line.strip() or _RULE.fullmatch(line):
            # A ruled line 「━━━━」 separates like a blank line and carries no text.
            self.end_paragraph()
            return
        if not self._detect:
            self._lines.append(line)
            return
        # Inside an article, numbered lines are its 項 and 号 (list items), not sections.
        numbered = self._numbered and self._base_level != _STRUCTURAL_LEVEL["article"]
        heading = match_heading(line, numbered=numbered)
        caption, self._caption = self._caption, None
        if caption is not None:
            if heading is not None and heading.kind == "article" and heading.is_bare:
                heading = heading._replace(text=heading.text + caption.strip())
            else:
                self._lines.append(caption)
        if heading is not None:
            self._add_heading(heading)
        elif CAPTION.fullmatch(line.strip()):
            self._caption = line
        else:
            self._lines.append(line)

    def end_paragraph(self) -> None:
        """Close the current paragraph; a pending caption waits for the next line."""
        if self._lines:
            self._blocks.append(Block("paragraph", "\n".join(self._lines), location=self.location))
            self._lines = []

    def add_block(self, block: Block) -> None:
        """Add a block the format marks itself (a styled heading, a table) in reading order."""
        self._flush_caption()
        self.end_paragraph()
        self._blocks.append(block)

    def add_table(self, rows: list[list[str]], *, cells: list[list[str]] | None = None,
                  notes: Iterable[str] = ()) -> None:
        """Add a table: its rows as one table block of text, and as cells (`cells`, where the
        format spreads merged cells differently from its text; else `rows`) when they form one.
        `notes` are the lines under it that belong to it (注1 …)."""
        text = "\n".join(line for line in map(render_row, rows) if line.strip(" |"))
        if not text:
            return
        self.add_block(Block("table", text, location=self.location))
        table = read_table(rows if cells is None else cells, notes=list(notes),
                           location=self.location)
        if table is not None:
            self.tables.append(table)

    def finish(self) -> list[Block]:
        """Return all blocks, closing any open paragraph."""
        self._flush_caption()
        self.end_paragraph()
        return self._blocks

    def pop_paragraph(self) -> list[str]:
        """Remove and return the open paragraph's lines (a Markdown setext underline needs them)."""
        lines, self._lines = self._lines, []
        return lines

    def _add_heading(self, heading: HeadingMatch) -> None:
        self.end_paragraph()
        if heading.kind == "numbered":
            level = min(self._base_level + heading.depth, _MAX_LEVEL)
        else:
            level = self._base_level = _STRUCTURAL_LEVEL[heading.kind]
        self._blocks.append(Block("heading", heading.text, level=level, location=self.location))
        if heading.body:
            self._lines.append(heading.body)

    def _flush_caption(self) -> None:
        if self._caption is not None:
            self._lines.append(self._caption)
            self._caption = None
