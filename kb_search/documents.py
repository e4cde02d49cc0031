"""Opening a cited source: a document's metadata, a passage with its neighbours, and the
original file, each only for a caller one of whose groups the document grants. A document
outside the caller's groups reads exactly as one that does not exist (None), so existence
does not leak."""

from __future__ import annotations

import datetime
import hashlib
from pathlib import Path

import msgspec
import psycopg
from psycopg.rows import dict_row

from kb_core.queries import query

__all__ = [
    "AROUND",
    "ChangedOriginalError",
    "DocumentPassage",
    "DocumentView",
    "Original",
    "document_view",
    "original_file",
]

AROUND = 1  # neighbours shown on each side of a cited passage


class DocumentPassage(msgspec.Struct):
    chunk_id: int
    chunk_index: int
    heading: str
    page: str | None
    content: str
    cited: bool  # the passage asked for (`chunk_id`), not one of its neighbours


class DocumentView(msgspec.Struct):
    """`GET /v1/documents/{id}`: named by its path, never the server's file path."""

    id: int
    path: str
    title: str
    mime: str
    size_bytes: int
    revision_date: datetime.date | None
    ingested_at: datetime.datetime
    chunks: int
    passages: list[DocumentPassage]
    original_url: str | None = None  # where the operator allows downloading the original


class Original(msgspec.Struct, frozen=True):
    filename: str
    content: bytes


class ChangedOriginalError(Exception):
    """The file no longer has the bytes that were indexed."""


def document_view(conn: psycopg.Connection, document_id: int, groups: list[str],
                  chunk_id: int | None = None) -> DocumentView | None:
    """The document and, with `chunk_id`, that passage and its neighbours; None when the
    caller may not read it, it does not exist, or `chunk_id` is not one of its passages."""
    params = {"id": document_id, "groups": groups, "chunk_id": chunk_id, "around": AROUND}
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(query("document_for_caller"), params).fetchone()
        if row is None:
            return None
        passages = []
        if chunk_id is not None:
            passages = [DocumentPassage(**p) for p in
                        cur.execute(query("passages_around_chunk"), params).fetchall()]
            if not passages:
                return None
    return DocumentView(**row, passages=passages)


def original_file(conn: psycopg.Connection, document_id: int,
                  groups: list[str]) -> Original | None:
    """The original file's bytes, only while their SHA-256 is the one indexed (else
    ChangedOriginalError); None when the caller may not read the document or its source is
    not a file here."""
    row = conn.execute(query("document_original_for_caller"),
                       {"id": document_id, "groups": groups}).fetchone()
    if row is None:
        return None
    source_uri, path, checksum, size_bytes = row
    source = Path(source_uri)
    if not source.is_absolute() or not source.is_file():
        return None
    # A file that grew is not read at all; the bytes hashed are the bytes served, so nothing
    # can be swapped in between the check and the response.
    content = b"" if source.stat().st_size != size_bytes else source.read_bytes()
    if len(content) != size_bytes or hashlib.sha256(content).hexdigest() != checksum:
        raise ChangedOriginalError(f"{path} has changed since it was indexed")
    return Original(filename=Path(path).name, content=content)
