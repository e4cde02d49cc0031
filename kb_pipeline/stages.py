"""The work of each asset, document by document, over the staging tables.

Each stage takes the documents of one run, does its part for each, and records a document that
fails in ingestion_failures without stopping the others. Only `index_documents` touches the live
index, one transaction per document, so the last good version stays searchable until then.
"""

from __future__ import annotations

import hashlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np
import psycopg

from kb_core.embeddings import Embedder
from kb_core.entities import ENTITIES_VERSION, passage_graph
from kb_core.index_model import record_index_model
from kb_core.keywords import KEYWORDS_VERSION, to_tsvector_literal
from kb_core.progress import report as report_progress
from kb_core.queries import query
from kb_core.settings import GraphLlmSettings, OcrSettings
from kb_pipeline.access import AccessError, DocumentAccess, resolve_access
from kb_pipeline.catalogue import file_checksum, file_mtime
from kb_pipeline.chunking import CHUNKER_VERSION, Chunk, chunk_document, embedding_views
from kb_pipeline.graph_llm import (
    Extraction,
    GraphExtractor,
    cache_extractions,
    cached_extractions,
    graph_llm_version,
    merge_extraction,
)
from kb_pipeline.ocr import AwaitingOcr, OcrError, missing_engine
from kb_pipeline.ocr.cache import CachedPages, EnginePages
from kb_pipeline.parsing import (
    PARSER_VERSION,
    NoTextFound,
    ParsedDocument,
    ParseError,
    parse_document,
)
from kb_pipeline.table_placement import placed_tables

__all__ = [
    "StageReport",
    "access_now",
    "cache_embeddings",
    "chunk_documents",
    "document_chunks",
    "embed_chunks",
    "graph_documents",
    "index_documents",
    "parse_documents",
    "pipeline_version",
    "read_scanned_pages",
    "stage_documents",
]

log = logging.getLogger(__name__)

# Room below e5's 512-token window for the tokenizer's rounding at chunk edges.
CHUNK_MAX_TOKENS = 500
CHUNK_OVERLAP_TOKENS = 64
# What the vector leg sees of a chunk longer than this: views of at most this many tokens, the
# chunk found by its best one (chunking.embedding_views). Chosen on both development sets with
# bench/views.py; part of the pipeline version, so a change re-embeds every installation once.
VIEW_MAX_TOKENS = 128
VIEW_OVERLAP_TOKENS = 32
# Passages of one document sent to the LLM extractor at once: its replies take seconds each,
# and a provider serves several at a time.
GRAPH_LLM_CONCURRENCY = 4


def pipeline_version(embedder: Embedder, graph_llm: GraphLlmSettings | None = None) -> str:
    """What decides, with the file's SHA-256, whether an indexed document is current. The LLM
    entity extractor (KB_GRAPH_LLM), where it is on, is part of it with its model and prompt:
    turning it on rebuilds the index once, gated by its evaluation, like any pipeline change."""
    llm = graph_llm_version(graph_llm) if graph_llm is not None else ""
    return (
        f"parser={PARSER_VERSION};chunker={CHUNKER_VERSION};"
        f"views={VIEW_MAX_TOKENS}/{VIEW_OVERLAP_TOKENS};keywords={KEYWORDS_VERSION};"
        f"entities={ENTITIES_VERSION}{f'+llm={llm}' if llm else ''};embedder={embedder.name}"
    )


@dataclass
class StageReport:
    """Counts for a materialization's metadata: what a data engineer looks at in the UI."""

    documents: int = 0
    skipped: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (source_uri, error)
    counts: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def add(self, name: str, value: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + value

    def metadata(self) -> dict[str, object]:
        return {
            "documents": self.documents,
            "skipped": self.skipped,
            "errors": len(self.failed),
            **self.counts,
            "elapsed_s": round(time.monotonic() - self.started, 3),
            **({"failures": "\n".join(f"{u}: {e}" for u, e in self.failed)} if self.failed else {}),
        }


@dataclass(frozen=True)
class RunScope:
    """The run a stage works for: its partition keys and identity."""

    keys: list[str]
    run_id: str
    version: str
    generation: int | None = None  # the index generation written; None: the live one


def _fail(
    conn: psycopg.Connection, scope: RunScope, report: StageReport, uri: str, stage: str,
    error: str, checksum: str | None,
) -> None:
    _record(conn, scope, uri, stage, error, checksum, skipped=False)
    log.error("%s failed at %s: %s", uri, stage, error)
    report.failed.append((uri, error))
    report_progress("failed", uri)


def _skip(
    conn: psycopg.Connection, scope: RunScope, report: StageReport, uri: str, stage: str,
    reason: str, checksum: str,
) -> None:
    """Record a document with nothing to index (a blank scan): like a failure, it is not tried
    again until its bytes change, but it is no error."""
    _record(conn, scope, uri, stage, reason, checksum, skipped=True)
    log.info("%s skipped: %s", uri, reason)
    report.add("without_text", 1)
    report_progress("skipped", uri)


def _record(
    conn: psycopg.Connection, scope: RunScope, uri: str, stage: str, error: str,
    checksum: str | None, *, skipped: bool,
) -> None:
    """Take `uri` out of this run and record why in ingestion_failures."""
    path = conn.execute(query("source_of"), {"uri": uri}).fetchone()
    with conn.transaction():
        conn.execute(query("unstage"), {"uri": uri, "run_id": scope.run_id})
        if skipped:  # the failures lists read the latest row that is no skip
            conn.execute(query("resolve_failures"), {"uri": uri})
        conn.execute(
            query("record_failure"),
            {"uri": uri, "path": path[1] if path else uri, "checksum": checksum, "stage": stage,
             "version": scope.version, "error": error, "run_id": scope.run_id,
             "skipped": skipped},
        )


def _await_ocr(
    conn: psycopg.Connection, scope: RunScope, uri: str, checksum: str, waiting: AwaitingOcr
) -> None:
    """Hand a scan to the OCR step: it leaves this run, its last good version stays indexed."""
    with conn.transaction():
        conn.execute(query("unstage"), {"uri": uri, "run_id": scope.run_id})
        conn.execute(query("await_ocr"), {
            "uri": uri, "checksum": checksum, "pages": waiting.pages, "unread": waiting.unread,
            "reason": waiting.reason})
    log.info("%s waits for OCR: %s", uri, waiting)
    report_progress("waiting", uri)


def _waits_for_ocr(conn: psycopg.Connection, uri: str, checksum: str) -> bool:
    row = conn.execute(query("waiting_of"), {"uris": [uri]}).fetchone()
    return row is not None and row[1] == checksum


def stage_documents(
    conn: psycopg.Connection, scope: RunScope, max_bytes: int, *, force: bool = False,
    content_only: bool = False,
) -> StageReport:
    """raw_documents: snapshot each file (checksum, size, access groups) unless it is current:
    same bytes and, unless `content_only`, the same pipeline version."""
    report = StageReport()
    for uri in scope.keys:
        file = Path(uri)
        source = conn.execute(query("source_of"), {"uri": uri}).fetchone()
        try:
            if source is None:
                raise _StageError("not registered by the sensor or `kb ingest`")
            stat = file.stat()
            if stat.st_size > max_bytes:
                raise _StageError(
                    f"file is {stat.st_size / 2**20:.1f} MB, over the limit of "
                    f"{max_bytes / 2**20:.0f} MB (KB_MAX_FILE_MB)"
                )
            checksum = file_checksum(file)
            indexed = conn.execute(query("indexed_checksum"), {"uri": uri}).fetchone()
            if not force and indexed is not None and indexed[0] == checksum and (
                    content_only or indexed[1] == scope.version):
                report.skipped += 1
                continue
            if _waits_for_ocr(conn, uri, checksum):  # the OCR step has it; ingested after
                report.add("waiting_for_ocr", 1)
                continue
            access = _resolve(uri, source)
        except FileNotFoundError:
            _fail(conn, scope, report, uri, "raw_documents",
                  "file disappeared before it could be read", None)
            continue
        except (OSError, AccessError, _StageError) as exc:
            _fail(conn, scope, report, uri, "raw_documents", _message(exc), None)
            continue
        conn.execute(
            query("stage_document"),
            {"uri": uri, "checksum": checksum, "size": stat.st_size,
             "mtime": file_mtime(stat),
             "version": scope.version, "groups": list(access.groups), "rule": access.rule,
             "run_id": scope.run_id},
        )
        report.documents += 1
        report.add("bytes", stat.st_size)
        if access.rule is None:
            report.add("without_access_rule", 1)
    return report


class _StageError(Exception):
    """A document-level problem with a message fit for the failures table."""


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot read file: {exc.strerror}"
    return str(exc) or type(exc).__name__


def parse_documents(conn: psycopg.Connection, scope: RunScope, ocr: OcrSettings) -> StageReport:
    """parsed_documents: text and structure of each staged file, checked against its snapshot.
    A scan's pages come from the OCR step's cache: one with pages not read yet waits for that
    step (ocr_waiting), and one where OCR found no text is skipped, saying so."""
    report = StageReport()
    scans = CachedPages(conn, ocr)
    for uri, checksum, mtime, _, _ in conn.execute(query("staged_for_run"), _params(scope)):
        report_progress("parsing", uri)
        try:
            data = Path(uri).read_bytes()
            if hashlib.sha256(data).hexdigest() != checksum:
                raise _StageError("file changed while it was being ingested; "
                                  "its new version is picked up on the next sensor tick")
            parsed = parse_document(Path(uri).name, data, modified=mtime.date(), scans=scans)
        except AwaitingOcr as exc:
            _await_ocr(conn, scope, uri, checksum, exc)
            report.add("waiting_for_ocr", 1)
            continue
        except NoTextFound as exc:
            _skip(conn, scope, report, uri, "parsed_documents", str(exc), checksum)
            continue
        except FileNotFoundError:
            _fail(conn, scope, report, uri, "parsed_documents",
                  "file disappeared before it could be parsed", checksum)
            continue
        except (OSError, ParseError, _StageError) as exc:
            _fail(conn, scope, report, uri, "parsed_documents", _message(exc), checksum)
            continue
        except Exception as exc:  # a parser bug must not stop the batch; it is recorded
            log.exception("unexpected parser error on %s", uri)
            _fail(conn, scope, report, uri, "parsed_documents",
                  f"unexpected parser error: {type(exc).__name__}: {exc}", checksum)
            continue
        conn.execute(
            query("save_parsed"),
            {"uri": uri, "run_id": scope.run_id, "parsed": msgspec.json.encode(parsed).decode()},
        )
        report.documents += 1
        report_progress("parsed", uri)
        report.add("characters", sum(len(b.text) for b in parsed.blocks))
        report.add("tables", sum(b.kind == "table" for b in parsed.blocks))
    return report


def read_scanned_pages(conn: psycopg.Connection, scope: RunScope, ocr: OcrSettings
                       ) -> StageReport:
    """scanned_pages: read by OCR the pages of the documents waiting for it (of this run's
    keys) that the cache lacks; the folder sensor then ingests them again, from the cache. A
    scan that breaks a limit or that the engine cannot read fails here, alone."""
    report = StageReport()
    waiting = conn.execute(query("waiting_of"), {"uris": scope.keys}).fetchall()
    missing = missing_engine()
    if missing:  # they stay waiting, to be read once the engine is installed
        log.warning("%d scans wait: %s", len(waiting), missing)
        report.add("waiting_for_engine", len(waiting))
        return report
    report_progress("to_read", count=sum(unread for _, _, unread in waiting))
    confidences: list[float] = []
    for uri, checksum, _ in waiting:
        pages = EnginePages(conn, ocr, uri)
        try:
            data = Path(uri).read_bytes()
            if hashlib.sha256(data).hexdigest() != checksum:
                # Edited since it was handed over: ingestion takes the new version afresh.
                conn.execute(query("stop_waiting"), {"uri": uri})
                continue
            parse_document(Path(uri).name, data, scans=pages)
        except NoTextFound:
            pass  # its blank pages are cached: ingestion skips it, saying so
        except FileNotFoundError:
            pass  # the sensor forgets it
        except (OSError, OcrError, ParseError) as exc:
            conn.execute(query("stop_waiting"), {"uri": uri})
            _fail(conn, scope, report, uri, "scanned_pages", _message(exc), checksum)
            continue
        conn.execute(query("stop_waiting"), {"uri": uri})
        report.documents += 1
        report.add("pages_read", pages.read_pages)
        report.add("pages_cached", pages.cached_pages)
        report.add("pages_without_text", pages.without_text)
        report.add("ocr_ms", round(pages.seconds * 1000))
        confidences += pages.confidences
    if confidences:
        report.add("mean_confidence", round(sum(confidences) / len(confidences)))
    return report


def document_chunks(doc: ParsedDocument, embedder: Embedder) -> list[Chunk]:
    """The passages a parsed document is indexed as, sized for `embedder`'s window."""
    return chunk_document(
        doc, embedder.count_tokens, max_tokens=min(CHUNK_MAX_TOKENS, embedder.max_tokens),
        overlap_tokens=CHUNK_OVERLAP_TOKENS,
    )


def chunk_documents(conn: psycopg.Connection, scope: RunScope, embedder: Embedder) -> StageReport:
    """chunks: heading-aware, token-bounded passages with their keyword terms."""
    report = StageReport()
    for uri, checksum, _, parsed, _ in conn.execute(query("staged_for_run"), _params(scope)):
        if parsed is None:
            continue
        document = msgspec.convert(parsed, ParsedDocument)
        chunks = document_chunks(document, embedder)
        scanned = set(document.ocr_locations)
        if not chunks:
            _fail(conn, scope, report, uri, "chunks", "document has no text to index", checksum)
            continue
        rows = [
            {"index": c.index, "heading": c.heading, "location": c.location,
             "content": c.content, "text": c.text, "token_count": c.token_count,
             "sha256": _sha256(c.text), "keywords": to_tsvector_literal(c.text),
             "ocr": c.location in scanned,
             "views": [{"text": view, "sha256": _sha256(view)} for view in embedding_views(
                 c, embedder.count_tokens, VIEW_MAX_TOKENS, VIEW_OVERLAP_TOKENS)]}
            for c in chunks
        ]
        tables = placed_tables(document.tables, chunks)
        conn.execute(
            query("save_chunks"),
            {"uri": uri, "run_id": scope.run_id, "chunks": msgspec.json.encode(rows).decode(),
             "tables": msgspec.json.encode(tables).decode()},
        )
        report.documents += 1
        report_progress("chunked", uri, len(rows))
        report.add("chunks", len(rows))
        report.add("views", sum(len(row["views"]) for row in rows))
        report.add("tokens", sum(c.token_count for c in chunks))
        report.add("tables", len(tables))
        report.add("table_rows", sum(len(t["rows"]) for t in tables))
    return report


def graph_documents(conn: psycopg.Connection, scope: RunScope,
                    extractor: GraphExtractor | None = None) -> StageReport:
    """entity_graph: the entities each staged passage names and the references it makes
    (kb_core/entities.py), with what `extractor` (KB_GRAPH_LLM) reads in it where it is on,
    staged for search_index to commit with the passages."""
    report = StageReport()
    if extractor is not None:  # every count shown, zero too, so a zero failure count is seen
        for name in ("llm_extracted", "llm_cached", "llm_failed", "llm_dropped"):
            report.add(name, 0)
    entities: set[str] = set()
    for uri, _, _, _, chunks in conn.execute(query("staged_for_run"), _params(scope)).fetchall():
        if chunks is None:
            continue
        read = _llm_readings(conn, extractor, uri, chunks, report) if extractor else {}
        rows = []
        for chunk in chunks:
            graph = passage_graph(chunk["text"])
            if (extraction := read.get(chunk["sha256"])) is not None:
                graph, dropped = merge_extraction(chunk["text"], graph, extraction)
                report.add("llm_dropped", dropped)
            rows.append({"index": chunk["index"], **msgspec.to_builtins(graph)})
            entities.update(entity.key for entity in graph.entities)
            report.add("mentions", len(graph.entities))
            report.add("references", len(graph.references))
        conn.execute(query("save_graph"), {"uri": uri, "run_id": scope.run_id,
                                           "graph": msgspec.json.encode(rows).decode()})
        report.documents += 1
    report.add("entities", len(entities))
    return report


def _llm_readings(conn: psycopg.Connection, extractor: GraphExtractor, uri: str,
                  chunks: list[dict], report: StageReport) -> dict[str, Extraction]:
    """The extractor's reading of each passage of a document, by its text's SHA-256: from the
    cache, else asked (and cached). A passage the provider fails on is left out, keeping the
    rules' graph, and is asked again the next time it is indexed."""
    texts = {chunk["sha256"]: chunk["text"] for chunk in chunks}
    read = cached_extractions(conn, extractor.model, list(texts))
    report.add("llm_cached", len(read))
    todo = [sha for sha in texts if sha not in read]
    with ThreadPoolExecutor(min(GRAPH_LLM_CONCURRENCY, max(len(todo), 1))) as pool:
        replies = list(pool.map(lambda sha: _ask(extractor, texts[sha]), todo))
    extracted = {}
    for sha, (extraction, error) in zip(todo, replies, strict=True):
        if extraction is None:
            log.warning("%s: the LLM extractor (%s) failed on a passage (sha256 %s), which "
                        "keeps the rules' graph: %s", uri, extractor.model, sha[:12], error)
            report.add("llm_failed", 1)
        else:
            extracted[sha] = extraction
    cache_extractions(conn, extractor.model, extracted)
    report.add("llm_extracted", len(extracted))
    return read | extracted


def _ask(extractor: GraphExtractor, text: str) -> tuple[Extraction | None, str]:
    """The extractor's reading of `text`, or None and why it failed."""
    try:
        return extractor.extract(text), ""
    # Deliberately broad: a provider fails in ways no list anticipates (network, HTTP status,
    # timeout, SDK validation, a reply that is no extraction), and one passage must not fail
    # its document. The failure is counted and logged in full by the caller.
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def embed_chunks(
    conn: psycopg.Connection, scope: RunScope, embedder: Embedder, batch_size: int = 32
) -> StageReport:
    """chunk_embeddings: embed every view of a chunk this model has not embedded before."""
    report = StageReport()
    params = {**_params(scope), "model": embedder.name}
    todo = conn.execute(query("texts_to_embed"), params).fetchall()
    report_progress("to_embed", count=len(todo))
    embed_s = 0.0
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        t0 = time.monotonic()
        vectors = np.asarray(embedder.embed_documents([text for _, text in batch]), np.float32)
        embed_s += time.monotonic() - t0
        cache_embeddings(conn, embedder.name, [sha for sha, _ in batch], vectors)
        report_progress("embedded", count=len(batch))
    staged = conn.execute(query("mark_embedded"), _params(scope)).rowcount
    report.documents = staged
    report.add("embedded", len(todo))
    report.add("embedding_ms", round(embed_s * 1000))
    return report


def cache_embeddings(
    conn: psycopg.Connection, model: str, shas: list[str], vectors: np.ndarray
) -> None:
    """Add `model`'s vectors of the texts with these SHA-256s to the embedding cache."""
    # Another run may embed the same text at the same time (two ingests of one changed file, or
    # copies of one file in two folders): a plain COPY into embedding_cache then failed the
    # whole run on its primary key. COPY into a scratch table, then add what is still missing.
    with conn.transaction():
        conn.execute(query("embedding_scratch"))
        with conn.cursor().copy(
            "COPY new_embeddings (model, text_sha256, embedding) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "vector"])
            for sha, vector in zip(shas, vectors, strict=True):
                copy.write_row((model, sha, vector))
        conn.execute(query("cache_new_embeddings"))


def index_documents(conn: psycopg.Connection, scope: RunScope, embedder: Embedder) -> StageReport:
    """search_index: replace each document's live rows, one transaction per document."""
    report = StageReport()
    ready = conn.execute(query("ready_to_index"), _params(scope)).fetchall()
    if ready:
        # Once per run, before any document: a mismatching model fails the run here.
        record_index_model(conn, embedder)
    for (uri,) in ready:
        # Access as it is now, not as it was when this run staged the file: a group revoked
        # while the run parsed and embedded must not be written back by it (the sensor has
        # already re-permissioned the live rows and would not do it again).
        try:
            access = access_now(conn, uri)
        except (OSError, AccessError) as exc:
            _fail(conn, scope, report, uri, "search_index", _message(exc), None)
            continue
        if access is None:  # forgotten meanwhile: _replace_document drops the staged version
            access = DocumentAccess(groups=(), rule=None)
        params = {"uri": uri, "run_id": scope.run_id, "model": embedder.name,
                  "groups": list(access.groups), "rule": access.rule}
        try:
            inserted = _replace_document(conn, params)
        except _IncompleteChunksError as exc:  # rolled back: the last good version stays
            _fail(conn, scope, report, uri, "search_index", str(exc), exc.checksum)
            continue
        if inserted is None:
            continue
        report.documents += 1
        report_progress("indexed", uri)
        report.add("chunks", inserted)
    return report


class _IncompleteChunksError(Exception):
    """A document's staged chunks could not all be inserted; its transaction is rolled back."""

    def __init__(self, message: str, checksum: str) -> None:
        super().__init__(message)
        self.checksum = checksum


def _replace_document(conn: psycopg.Connection, params: dict[str, object]) -> int | None:
    """Replace one document's live rows with its staged version in one transaction; return the
    chunks inserted, or None when this run no longer owns the staged version."""
    with conn.transaction():
        conn.execute(query("lock_keyword_stats"))
        # Lock the staged row for the whole transaction: a concurrent ingest of the same file
        # re-staging it between upsert_document and insert_chunks left the document with no
        # chunks at all (insert_chunks found no row of this run), visible to every reader.
        staged = conn.execute(query("lock_staged"), params).fetchone()
        if staged is None:  # taken over by a newer run, or the file was forgotten meanwhile
            return None
        conn.execute(query("restage_access"), params)
        row = conn.execute(query("upsert_document"), params).fetchone()
        if row is None:  # its file left the catalogue: the staged version has nowhere to go
            conn.execute(query("unstage"), params)
            return None
        document_id, created = row
        conn.execute(query("record_content"), params)
        if not created:  # a new document (a rebuild's every one) has nothing to take out
            conn.execute(query("delete_chunks"), {"document_id": document_id})
        vectors = conn.execute(
            query("insert_chunks"), {**params, "document_id": document_id}
        ).rowcount
        conn.execute(query("insert_mentions"), {**params, "document_id": document_id})
        conn.execute(query("insert_relations"), {**params, "document_id": document_id})
        conn.execute(query("insert_tables"), {**params, "document_id": document_id})
        conn.execute(query("insert_table_rows"), {**params, "document_id": document_id})
        chunks, views, checksum = staged
        if vectors != views:
            # A view whose vector is missing would leave its part of the chunk unfindable by
            # the vector leg (or the whole chunk): never publish it.
            raise _IncompleteChunksError(
                f"only {vectors} of {views} embedding views had vectors; not indexed",
                checksum,
            )
        conn.execute(query("resolve_failures"), params)
        conn.execute(query("unstage"), params)
    return chunks


def access_now(conn: psycopg.Connection, uri: str) -> DocumentAccess | None:
    """The file's access rule read now; None once the file has left the catalogue. Raises
    OSError or AccessError when the rule cannot be read."""
    source = conn.execute(query("source_of"), {"uri": uri}).fetchone()
    return None if source is None else _resolve(uri, source)


def _resolve(uri: str, source: tuple) -> DocumentAccess:
    """The access rule of `uri`, given its catalogue row (root, path, fallback groups)."""
    root, _, fallback = source
    return resolve_access(Path(uri), Path(root), tuple(fallback) if fallback else None)


def _params(scope: RunScope) -> dict[str, object]:
    return {"run_id": scope.run_id, "uris": scope.keys}
