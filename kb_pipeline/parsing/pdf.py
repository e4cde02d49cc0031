"""PDF text layers (pypdf): per-page blocks, with lines the layout wrapped joined back."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

from pypdf import PageObject, PasswordType, PdfReader
from pypdf.errors import DependencyError

from kb_pipeline.parsing.blocks import BlockBuilder
from kb_pipeline.parsing.cjk import SENTENCE_ENDINGS, display_width, is_cjk
from kb_pipeline.parsing.headings import CAPTION, match_heading
from kb_pipeline.parsing.model import Block, ParsedDocument, ParseError
from kb_pipeline.parsing.titles import MAX_TITLE_CHARS, first_heading, meaningful_title

__all__ = ["join_wrapped_lines", "parse_pdf"]

# A line this much narrower than the page's full lines ended early: it was not wrapped.
_FULL_LINE_SHARE = 0.8
# Lines shorter than this (in half-width cells: 10 kanji) are titles or cells, not wrapped text.
_MIN_WRAPPED_WIDTH = 20
_LIST_ITEM = re.compile(r"[・●○■□◆◇▪•※\-–—*]|[0-9０-９]+[ 　]|[①-⑳]")
_MAX_PAGE_NUMBER_CHARS = 20
_PAGE_NUMBER = re.compile(
    r"[-–—(（\s]*(?:p\.?\s*)?[0-9]+\s*(?:/\s*[0-9]+)?[-–—)）\s]*", re.IGNORECASE
)


def parse_pdf(data: bytes, stem: str) -> ParsedDocument:
    """Return a PDF's text as blocks located by page ("p.3")."""
    reader = _open(data)
    pages = _drop_running_lines([_page_lines(page, n) for n, page in enumerate(reader.pages, 1)])
    if not pages:
        raise ParseError("PDF has no pages (its page tree is empty or unreadable)")
    if not any(any(lines) for lines in pages):
        count = f"{len(pages)} page" + ("" if len(pages) == 1 else "s")
        raise ParseError(f"PDF has no text layer (scanned image?); {count}, no extractable text")
    builder = BlockBuilder()
    for number, lines in enumerate(pages, start=1):
        builder.end_paragraph()
        builder.location = f"p.{number}"
        for line in join_wrapped_lines(lines):
            builder.add_line(line)
    blocks = builder.finish()
    return ParsedDocument(
        title=_metadata_title(reader) or _first_line(blocks) or first_heading(blocks) or stem,
        mime="application/pdf",
        blocks=blocks,
    )


def _page_lines(page: PageObject, number: int) -> list[str]:
    try:
        text = page.extract_text() or ""
    except Exception as exc:  # pypdf raises many types on malformed content streams
        raise ParseError(f"PDF page {number}: text extraction failed: {exc}") from exc
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _drop_running_lines(pages: list[list[str]]) -> list[list[str]]:
    """Remove page numbers and the running header/footer lines repeated on most pages.

    Only the first and last two lines of a page are candidates, and digits are ignored when
    comparing, so 「経費精算規程 3/10」 on every page is recognised as one running line.
    """

    def edges(lines: list[str]) -> set[int]:
        return {i for i in (0, 1, len(lines) - 2, len(lines) - 1) if 0 <= i < len(lines)}

    def key(line: str) -> str:
        return re.sub(r"[0-9]+", "#", line)

    seen_on: dict[str, int] = {}
    for lines in pages:
        for text in {key(lines[i]) for i in edges(lines) if lines[i]}:
            seen_on[text] = seen_on.get(text, 0) + 1
    threshold = max(2, (len(pages) + 1) // 2)
    running = {text for text, count in seen_on.items() if count >= threshold}
    kept_pages = []
    for lines in pages:
        dropped = {i for i in edges(lines) if _is_page_number(lines[i]) or key(lines[i]) in running}
        kept_pages.append([line for i, line in enumerate(lines) if i not in dropped])
    return kept_pages


def join_wrapped_lines(lines: Sequence[str]) -> list[str]:
    """Return `lines` with the lines the layout wrapped mid-sentence joined to the line before.

    Inside Japanese text the join adds nothing (「…精算す」+「る。」→「…精算する。」); between
    Latin words it adds a space. Blank lines stay, as paragraph breaks.
    """
    widths = sorted(display_width(line) for line in lines if line.strip())
    full_width = widths[round(0.9 * (len(widths) - 1))] if widths else 0
    joined: list[str] = []
    previous = ""  # the previous physical line, not the joined line
    for raw in lines:
        line = raw.strip()
        if joined and previous and line and _continues(previous, line, full_width):
            joined[-1] += _separator(previous, line) + line
        else:
            joined.append(line)
        previous = line
    return joined


def _continues(previous: str, line: str, full_width: int) -> bool:
    """Whether `line` carries on the sentence `previous` was cut from."""
    width = display_width(previous)
    if width < _MIN_WRAPPED_WIDTH or width < _FULL_LINE_SHARE * full_width:
        return False
    if previous[-1] in SENTENCE_ENDINGS or _LIST_ITEM.match(line) or CAPTION.fullmatch(line):
        return False
    if match_heading(line) is not None:
        return False
    heading = match_heading(previous)
    if heading is not None and not heading.body:
        return False
    last, first = previous[-1], line[0]
    if is_cjk(last) or is_cjk(first):
        return True
    return (last.isalnum() or last in ",;:-)") and (first.isalnum() or first in "(\"'")


def _separator(previous: str, line: str) -> str:
    if is_cjk(previous[-1]) or is_cjk(line[0]):
        return ""
    if previous[-1] == "-" and previous[-2:-1].isalpha() and line[0].islower():
        return ""  # a hyphenated word: 「well-\nknown」
    return " "


def _is_page_number(line: str) -> bool:
    return len(line) <= _MAX_PAGE_NUMBER_CHARS and _PAGE_NUMBER.fullmatch(line) is not None


def _open(data: bytes) -> PdfReader:
    if b"%PDF-" not in data[:1024]:
        raise ParseError("not a PDF file: no %PDF- header")
    if b"%%EOF" not in data:
        raise ParseError("PDF is truncated: no %%EOF marker at the end")
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        encrypted = reader.is_encrypted
    except Exception as exc:  # pypdf signals corrupt files with many exception types
        raise ParseError(f"not a readable PDF: {type(exc).__name__}: {exc}") from exc
    if encrypted:
        _decrypt_without_password(reader)
    try:
        _ = len(reader.pages)
    except Exception as exc:
        raise ParseError(f"PDF page tree is corrupt: {type(exc).__name__}: {exc}") from exc
    return reader


def _decrypt_without_password(reader: PdfReader) -> None:
    """Open PDFs that are encrypted only against editing (empty user password)."""
    try:
        result = reader.decrypt("")
    except DependencyError as exc:
        raise ParseError(
            "PDF is encrypted with AES; decrypting it needs the 'cryptography' package"
        ) from exc
    except Exception as exc:
        raise ParseError(f"PDF is encrypted and could not be decrypted: {exc}") from exc
    if result == PasswordType.NOT_DECRYPTED:
        raise ParseError("PDF is encrypted: a password is required to open it")


def _metadata_title(reader: PdfReader) -> str | None:
    try:
        metadata = reader.metadata
        return meaningful_title(metadata.title) if metadata is not None else None
    except Exception:  # a broken Info dictionary only costs us the metadata title
        return None


def _first_line(blocks: list[Block]) -> str | None:
    first = blocks[0].text.split("\n", 1)[0].strip() if blocks else ""
    return first if 0 < len(first) <= MAX_TITLE_CHARS else None
