"""HTML: headings, tables and paragraphs from the page body, walked without recursion."""

from __future__ import annotations

import re
from collections.abc import Iterator

from bs4 import BeautifulSoup, NavigableString, PageElement, Tag
from bs4.element import PreformattedString

from kb_pipeline.parsing.blocks import BlockBuilder
from kb_pipeline.parsing.cjk import join_line_breaks
from kb_pipeline.parsing.encoding import decode_text
from kb_pipeline.parsing.model import Block, ParsedDocument, ParseError, Table
from kb_pipeline.parsing.titles import first_heading, meaningful_title

__all__ = ["parse_html"]

_DROPPED = frozenset({"script", "style", "noscript", "template", "head", "svg", "math"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
# Elements that start a new paragraph: text on either side of them is not one paragraph.
_BREAKING = frozenset(
    {
        *("address", "article", "aside", "blockquote", "body", "caption", "center", "dd"),
        *("details", "dialog", "div", "dl", "dt", "fieldset", "figcaption", "figure"),
        *("footer", "form", "header", "hgroup", "hr", "html", "li", "main", "menu", "nav"),
        *("ol", "p", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead"),
        *("tr", "ul"),
    }
)
_DECLARED_CHARSET = re.compile(
    rb"""<meta[^>]+?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)"""
    rb"""|<\?xml[^>]+encoding\s*=\s*["']([A-Za-z0-9_.:\-]+)""",
    re.IGNORECASE,
)
# Marks a <br> in collected text; decode_text guarantees the text itself has no NUL.
_BR = "\x00"
_HTML_SPACES = re.compile(r"[ \t\f]+")


def parse_html(data: bytes, stem: str, *, suffix: str = ".html") -> ParsedDocument:
    """Return an HTML page's headings, tables and paragraphs in reading order."""
    declared = _DECLARED_CHARSET.search(data[:4096])
    charset = (declared[1] or declared[2]).decode("ascii") if declared else None
    text = decode_text(data, suffix, declared=charset)
    try:
        soup = BeautifulSoup(text, "html.parser")
        page_title = meaningful_title(soup.title.get_text()) if soup.title else None
        blocks, tables = _page_blocks(soup)
    except RecursionError as exc:
        raise ParseError("HTML is nested too deeply to parse") from exc
    title = page_title or first_heading(blocks, level=1) or stem
    return ParsedDocument(title=title, mime="text/html", blocks=blocks, tables=tables)


def _page_blocks(soup: BeautifulSoup) -> tuple[list[Block], list[Table]]:
    builder = BlockBuilder(detect_headings=False)
    inline: list[str] = []
    for event, node in _walk(soup):
        if event == "text":
            inline.append(str(node))
        elif event == "whole" and node.name == "table":
            _flush(inline, builder)
            builder.add_table(list(_table_rows(node)), cells=_table_grid(node))
        elif event == "whole":
            _flush(inline, builder)
            block = _whole_block(node)
            if block is not None:
                builder.add_block(block)
        elif event == "start" and node.name == "br":
            inline.append(_BR)
        elif node.name in _BREAKING:
            _flush(inline, builder)
    _flush(inline, builder)
    return builder.finish(), builder.tables


def _whole_block(node: Tag) -> Block | None:
    if node.name in _HEADINGS:
        heading = _collapse(node.get_text())
        return Block("heading", heading, level=_HEADINGS[node.name]) if heading else None
    if node.name == "pre":
        code = "\n".join(line.rstrip() for line in node.get_text().split("\n")).strip("\n")
        return Block("paragraph", code) if code.strip() else None
    return None


def _walk(root: Tag) -> Iterator[tuple[str, PageElement]]:
    """Yield ("start" | "end" | "text" | "whole", node) in document order, with an explicit stack.

    Headings, <pre> and data tables come as "whole": their content is read in one piece.
    """
    stack: list[tuple[Tag, Iterator[PageElement]]] = [(root, iter(root.contents))]
    while stack:
        parent, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            yield "end", parent
        elif isinstance(child, NavigableString):
            if not isinstance(child, PreformattedString):  # comments, doctype, CDATA
                yield "text", child
        elif isinstance(child, Tag) and child.name not in _DROPPED:
            if child.name in _HEADINGS or child.name == "pre" or _is_data_table(child):
                yield "whole", child
            else:
                yield "start", child
                stack.append((child, iter(child.contents)))


def _is_data_table(node: Tag) -> bool:
    """Whether `node` is a table of data, not one of the tables old intranet pages use for layout.

    Layout tables hold headings or further tables; their content is read like any other.
    """
    return node.name == "table" and node.find([*_HEADINGS, "table"]) is None


def _table_rows(table: Tag) -> Iterator[list[str]]:
    for row in table.find_all("tr"):
        if row.find_parent("table") is table:
            cells = row.find_all(["td", "th"], recursive=False)
            yield [_collapse(cell.get_text()) for cell in cells]


def _table_grid(table: Tag) -> list[list[str]]:
    """The table's cells on its grid: a cell spanning columns (colspan) stands in its first and
    leaves the others empty, one spanning rows (rowspan) is repeated in the rows below."""
    grid: list[list[str]] = []
    below: dict[int, tuple[str, int]] = {}  # column → (text, rows it still spans)
    for tr in table.find_all("tr"):
        if tr.find_parent("table") is not table:
            continue
        row: list[str] = []
        cells = iter(tr.find_all(["td", "th"], recursive=False))
        while True:
            column = len(row)
            if column in below:
                text, left = below.pop(column)
                row.append(text)
                if left > 1:
                    below[column] = (text, left - 1)
                continue
            cell = next(cells, None)
            if cell is None:
                break
            text, span = _collapse(cell.get_text()), _span(cell, "colspan")
            if (rows := _span(cell, "rowspan")) > 1:
                below[len(row)] = (text, rows - 1)
            row.extend([text, *[""] * (span - 1)])
        grid.append(row)
    return grid


def _span(cell: Tag, attribute: str) -> int:
    value = str(cell.get(attribute, "1")).strip()
    return min(int(value), 100) if value.isdigit() and int(value) > 0 else 1


def _flush(inline: list[str], builder: BlockBuilder) -> None:
    if not inline:
        return
    lines = [_collapse(part) for part in "".join(inline).split(_BR)]
    inline.clear()
    for line in lines:
        if line:
            builder.add_line(line)
    builder.end_paragraph()


def _collapse(text: str) -> str:
    """Collapse HTML whitespace; a source line break between Japanese characters is dropped."""
    return _HTML_SPACES.sub(" ", join_line_breaks(text))
