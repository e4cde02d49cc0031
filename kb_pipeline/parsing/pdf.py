"""PDFs (pypdf): per-page blocks from the text layer, with lines the layout wrapped joined back;
a page with no text layer but an image on it (a scan) is read by OCR."""

from __future__ import annotations

import io
import re

from pypdf import PageObject, PasswordType, PdfReader
from pypdf.errors import DependencyError

from kb_pipeline.ocr import PageReader, pdf_pages
from kb_pipeline.parsing.blocks import BlockBuilder
from kb_pipeline.parsing.model import Block, NoTextFound, ParsedDocument, ParseError
from kb_pipeline.parsing.scans import add_scanned_lines, page_lines
from kb_pipeline.parsing.titles import MAX_TITLE_CHARS, first_heading, meaningful_title
from kb_pipeline.parsing.wrapped import join_wrapped_lines

__all__ = ["parse_pdf"]

_MAX_PAGE_NUMBER_CHARS = 20
_PAGE_NUMBER = re.compile(
    r"[-–—(（\s]*(?:p\.?\s*)?[0-9]+\s*(?:/\s*[0-9]+)?[-–—)）\s]*", re.IGNORECASE
)


def parse_pdf(data: bytes, stem: str, scans: PageReader | None = None) -> ParsedDocument:
    """Return a PDF's text as blocks located by page ("p.3"); `scans` reads its scanned pages
    (without it, a PDF with no text layer at all fails, naming the scan)."""
    reader = _open(data)
    texts = [_page_lines(page, n) for n, page in enumerate(reader.pages, 1)]
    if not texts:
        raise ParseError("PDF has no pages (its page tree is empty or unreadable)")
    count = f"{len(texts)} page" + ("" if len(texts) == 1 else "s")
    scanned = [n for n, lines in enumerate(texts, 1)
               if not any(lines) and _has_image(reader.pages[n - 1])]
    if scanned and scans is None and not any(any(lines) for lines in texts):
        raise ParseError(f"PDF has no text layer (scanned image?); {count}, no extractable text")
    read = {}
    if scanned and scans is not None:
        read = scans.read(pdf_pages(data, scanned, scans.limits))
        for number, reading in read.items():
            texts[number - 1] = page_lines(reading)
    pages = _drop_running_lines(texts)
    if not any(any(lines) for lines in pages):
        if read:
            raise NoTextFound(f"no text found by OCR on its {count}")
        raise ParseError(f"PDF has no text: {count}, without a text layer or an image to read")
    builder = BlockBuilder()
    for number, lines in enumerate(pages, start=1):
        builder.end_paragraph()
        builder.location = f"p.{number}"
        if number in read:
            add_scanned_lines(builder, lines)
            continue
        for line in join_wrapped_lines(lines):
            builder.add_line(line)
    blocks = builder.finish()
    return ParsedDocument(
        title=_metadata_title(reader) or _first_line(blocks) or first_heading(blocks) or stem,
        mime="application/pdf",
        blocks=blocks,
        ocr_locations=[f"p.{n}" for n in sorted(read) if any(pages[n - 1])],
    )


def _has_image(page: PageObject) -> bool:
    """Whether an image is drawn on the page (directly or in a form): a page without text and
    without an image is blank, and not worth reading."""
    try:
        return _holds_image(page.get("/Resources"), depth=0)
    except Exception:  # a broken resource dictionary: read the page rather than lose it
        return True


def _holds_image(resources: object, depth: int) -> bool:
    resources = resources.get_object() if hasattr(resources, "get_object") else resources
    if not isinstance(resources, dict) or depth > 3:
        return False
    xobjects = resources.get("/XObject")
    xobjects = xobjects.get_object() if hasattr(xobjects, "get_object") else xobjects
    for xobject in (xobjects or {}).values():
        xobject = xobject.get_object()
        if xobject.get("/Subtype") == "/Image":
            return True
        if xobject.get("/Subtype") == "/Form" and _holds_image(xobject.get("/Resources"),
                                                               depth + 1):
            return True
    return False


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
