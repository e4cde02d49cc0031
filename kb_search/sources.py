"""Opening a cited source: a document's metadata, a passage with its neighbours, and the
original file, each only for a caller one of whose groups the document grants. A document
outside the caller's groups reads exactly as one that does not exist (None), so existence
does not leak."""

from __future__ import annotations

import datetime
import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import msgspec
import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from kb_core.callers import Caller
from kb_core.queries import query
from kb_core.read_routing import ReadRouter
from kb_search.passage_reference import ReadByOcr

__all__ = [
    "AROUND",
    "ChangedOriginalError",
    "DocumentPassage",
    "DocumentView",
    "IndexedOriginal",
    "Original",
    "Sources",
    "document_view",
    "indexed_original",
    "verified_copy",
]

AROUND = 1  # neighbours shown on each side of a cited passage
PIECE_BYTES = 64 * 1024  # an original is hashed, copied and sent in pieces of this size
SPOOL_BYTES = 1024 * 1024  # a copy larger than this goes to a temporary file, not memory


class DocumentPassage(msgspec.Struct):
    chunk_id: int
    chunk_index: int
    heading: str
    page: str | None
    ocr: ReadByOcr
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


class IndexedOriginal(msgspec.Struct, frozen=True):
    """Where a document's original lives, and what it held when it was indexed."""

    source: Path
    filename: str
    checksum: str
    size_bytes: int


class Original(msgspec.Struct, frozen=True):
    """A private copy of an original, positioned at its start; `pieces` reads and closes it."""

    filename: str
    size_bytes: int
    content: BinaryIO

    def pieces(self) -> Iterator[bytes]:
        """The copy's bytes, piece by piece; it is closed at the end, or when a reader that
        went away drops the iterator."""
        with self.content:
            while piece := self.content.read(PIECE_BYTES):
                yield piece


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


def indexed_original(conn: psycopg.Connection, document_id: int,
                     groups: list[str]) -> IndexedOriginal | None:
    """The original of a document the caller may read; None when the caller may not read it,
    or its source is not a file here."""
    row = conn.execute(query("document_original_for_caller"),
                       {"id": document_id, "groups": groups}).fetchone()
    if row is None:
        return None
    source_uri, path, checksum, size_bytes = row
    source = Path(source_uri)
    if not source.is_absolute() or not source.is_file():
        return None
    return IndexedOriginal(source, Path(path).name, checksum, size_bytes)


def verified_copy(original: IndexedOriginal) -> Original:
    """A copy of the original's bytes, only while their SHA-256 is the one indexed (else
    ChangedOriginalError). The bytes hashed are the bytes copied, and the copy is what is
    sent, so nothing can be swapped in between the check and the response; memory holds at
    most SPOOL_BYTES of it."""
    copy = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - returned open
    sha256, size = hashlib.sha256(), 0
    try:
        with original.source.open("rb") as source:
            # One piece past the indexed size is enough to tell that the file grew.
            while size <= original.size_bytes and (piece := source.read(PIECE_BYTES)):
                sha256.update(piece)
                copy.write(piece)
                size += len(piece)
        if size != original.size_bytes or sha256.hexdigest() != original.checksum:
            raise ChangedOriginalError(f"{original.filename} has changed since it was indexed")
    except BaseException:
        copy.close()
        raise
    copy.seek(0)
    return Original(original.filename, size, copy)


class Sources:
    """The documents answers cite, as the caller may read them: metadata, passages, originals."""

    def __init__(self, pool: ConnectionPool, reads: ReadRouter) -> None:
        self._pool = pool
        self._reads = reads

    def document(self, caller: Caller, document_id: int,
                 chunk_id: int | None = None) -> DocumentView | None:
        """A document the caller may read and, with `chunk_id`, that passage and its
        neighbours; None as for a document that does not exist."""
        with self._pool.connection() as conn:
            return document_view(conn, document_id, list(caller.groups), chunk_id)

    def original(self, caller: Caller, document_id: int) -> Original | None:
        """A copy of the original file of a document the caller may read, while it is the one
        indexed (ChangedOriginalError otherwise); None as for a document that does not exist.
        No connection is held while the file is read."""
        with self._pool.connection() as conn:
            indexed = indexed_original(conn, document_id, list(caller.groups))
        return None if indexed is None else verified_copy(indexed)

    def document_groups(self, source_uris: list[str]) -> dict[str, list[str]]:
        """The groups each document (or learned fact) grants, by source_uri: whom an answer
        citing it may reach. For evaluation, which checks every citation against the
        question's groups; a caller's own reads are filtered in SQL and need none of this."""
        def read(conn: psycopg.Connection) -> dict[str, list[str]]:
            rows = conn.execute(query("documents_groups"), {"uris": source_uris}).fetchall()
            return {uri: list(allowed) for uri, allowed in rows}

        return self._reads.run(read)
