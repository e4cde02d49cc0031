"""Choosing a document's title from its metadata, its headings or its file name."""

from __future__ import annotations

import re
from collections.abc import Sequence

from kb_pipeline.parsing.model import Block

__all__ = ["MAX_TITLE_CHARS", "first_heading", "meaningful_title"]

MAX_TITLE_CHARS = 60
# Producers fill the title field with placeholders and file names nobody chose as a title.
_PLACEHOLDER = re.compile(
    r"(?i)(untitled|no title|無題|タイトルなし|document\d*|ドキュメント\d*|スライド\s*\d*|"
    r"powerpoint プレゼンテーション|powerpoint presentation|microsoft (word|excel|powerpoint) - .*|"
    r".*\.(docx?|xlsx?|pptx?|pdf|txt|rtf|md|html?))"
)


def meaningful_title(value: object) -> str | None:
    """Return `value` as a title if it is one a person chose, else None."""
    if not isinstance(value, str):
        return None
    title = " ".join(value.split())
    if not title or _PLACEHOLDER.fullmatch(title):
        return None
    return title


def first_heading(blocks: Sequence[Block], level: int | None = None) -> str | None:
    """Return the text of the first heading (of `level`, if given), on one line."""
    for block in blocks:
        if block.kind == "heading" and (level is None or block.level == level):
            return " ".join(block.text.split())
    return None
