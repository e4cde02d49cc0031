"""Reading scanned pages (docs/ocr.md): the engine, the page images it reads under the limits,
and the readers a parser is given: `CachedPages` during ingestion (pages already read, else
the document waits for OCR) and `EnginePages` in the OCR step (reads what the cache lacks)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kb_core.settings import OcrSettings
from kb_pipeline.ocr.engine import (
    EngineMissing,
    OcrError,
    OcrResult,
    engine_identity,
    missing_engine,
)
from kb_pipeline.ocr.pages import IMAGE_SUFFIXES, PageImage, image_pages, pdf_pages

__all__ = [
    "IMAGE_SUFFIXES",
    "AwaitingOcr",
    "EngineMissing",
    "OcrError",
    "OcrResult",
    "PageImage",
    "PageReader",
    "engine_identity",
    "image_pages",
    "missing_engine",
    "pdf_pages",
]


class PageReader(Protocol):
    """What a parser asks for the text of pages it found without any."""

    limits: OcrSettings

    def read(self, pages: Iterable[PageImage]) -> dict[int, OcrResult]:
        """Each page's reading by page number; raises AwaitingOcr or OcrError."""
        ...


class AwaitingOcr(Exception):
    """A document with pages not read yet: it waits for the OCR step, which is no failure."""

    def __init__(self, unread: int, pages: int, reason: str) -> None:
        super().__init__(f"{unread} of {pages} pages wait for OCR: {reason}")
        self.unread = unread
        self.pages = pages
        self.reason = reason
