"""The readers a parser is given, over the cache of pages read (table ocr_pages), and the
documents waiting for the OCR step (table ocr_waiting)."""

from __future__ import annotations

import time
from collections.abc import Iterable

import psycopg

from kb_core.progress import report
from kb_core.queries import query
from kb_core.settings import OcrSettings
from kb_pipeline.ocr import AwaitingOcr
from kb_pipeline.ocr.engine import (
    OcrError,
    OcrResult,
    engine_identity,
    missing_engine,
    read_image,
)
from kb_pipeline.ocr.pages import PageImage

__all__ = ["CachedPages", "EnginePages", "waiting_scans"]


class CachedPages:
    """Pages the OCR step has read already. Ingestion never runs the engine: a document with a
    page not read yet waits for that step (AwaitingOcr), so text documents never queue behind
    scans, and a rebuild or a re-ingest of an unchanged scan reads nothing."""

    def __init__(self, conn: psycopg.Connection, limits: OcrSettings) -> None:
        self.limits = limits
        self._conn = conn

    def read(self, pages: Iterable[PageImage]) -> dict[int, OcrResult]:
        missing = missing_engine()
        engine = None if missing else engine_identity()
        found: dict[int, OcrResult] = {}
        total = 0
        for page in pages:
            total += 1
            cached = _cached(self._conn, page, engine) if engine else None
            if cached is not None:
                found[page.number] = cached
        if len(found) < total:
            raise AwaitingOcr(total - len(found), total, missing or "not read yet")
        return found


class EnginePages:
    """Reads with the engine what the cache lacks and keeps it; counts what the OCR step's
    metadata shows."""

    def __init__(self, conn: psycopg.Connection, limits: OcrSettings, uri: str) -> None:
        self.limits = limits
        self._conn = conn
        self._uri = uri
        self.read_pages = 0
        self.cached_pages = 0
        self.without_text = 0
        self.seconds = 0.0
        self.confidences: list[float] = []

    def read(self, pages: Iterable[PageImage]) -> dict[int, OcrResult]:
        engine = engine_identity()
        found: dict[int, OcrResult] = {}
        for page in pages:
            result = _cached(self._conn, page, engine)
            if result is not None:
                self.cached_pages += 1
            else:
                result = self._read(page, engine)
            found[page.number] = result
        return found

    def _read(self, page: PageImage, engine: str) -> OcrResult:
        started = time.monotonic()
        try:
            result = read_image(page.image, self.limits.page_timeout_s)
        except OcrError as exc:
            raise OcrError(f"page {page.number}: {exc}") from exc
        seconds = time.monotonic() - started
        self._conn.execute(query("save_ocr_page"), {
            "sha256": page.sha256, "engine": engine, "dpi": page.dpi, "text": result.text,
            "confidence": result.confidence, "vertical": result.vertical,
            "rotation": result.rotation, "seconds": round(seconds, 3)})
        self.read_pages += 1
        self.seconds += seconds
        if result.confidence is not None:
            self.confidences.append(result.confidence)
        if not result.text.strip():
            self.without_text += 1
        report("page_read", self._uri)
        return result


def _cached(conn: psycopg.Connection, page: PageImage, engine: str) -> OcrResult | None:
    row = conn.execute(query("ocr_page"),
                       {"sha256": page.sha256, "engine": engine, "dpi": page.dpi}).fetchone()
    return None if row is None else OcrResult(*row)


def waiting_scans(conn: psycopg.Connection) -> set[str]:
    """The documents (source URIs) whose pages wait for the OCR step."""
    return {row[0] for row in conn.execute(query("ocr_waiting"))}
