"""What an operator and the doors' health checks ask of an installation: what the index holds
(documents, failures, counts, generations), the embedding model questions are embedded with,
and the read replicas' state."""

from __future__ import annotations

import datetime as dt

import msgspec
from psycopg_pool import ConnectionPool

from kb_core.generations import list_generations
from kb_core.index_fence import follow_index_changes
from kb_core.index_model import recorded_model
from kb_core.ingestion_failures import IngestionFailure, open_failures
from kb_core.queries import query
from kb_core.read_routing import ReadRouter, ReplicaStatus
from kb_search.search import Searcher

__all__ = [
    "IndexCounts",
    "IndexGeneration",
    "IndexStatus",
    "IndexedDocument",
    "Operations",
]

_BUILDING = ("building", "evaluating", "passed")  # a rebuild in progress


class IndexedDocument(msgspec.Struct):
    """A document of the live index (`kb docs`)."""

    path: str
    title: str
    allowed_groups: list[str]
    access_rule: str | None
    chunks: int
    revision_date: dt.date | None
    revision_source: str | None
    ingested_at: dt.datetime
    source_uri: str


class IndexGeneration(msgspec.Struct):
    """An index generation as `kb status` shows it: the live one, or a rebuild in progress."""

    id: int
    state: str
    model: str | None
    pipeline_version: str | None


class IndexCounts(msgspec.Struct):
    """What the live index holds, and whom it shows it to."""

    documents: int
    chunks: int
    failures: int  # files whose last ingest failed (`kb failures`)
    waiting_for_ocr: int  # scans whose pages wait for the OCR step (docs/ocr.md)
    groups: dict[str, int]  # documents each group sees
    visible_to_nobody: int


class IndexStatus(msgspec.Struct):
    """The index on one screen (`kb status`): the live generation, a rebuild in progress, the
    counts and the database's size."""

    generation: IndexGeneration | None
    rebuild: IndexGeneration | None
    index: IndexCounts
    size_bytes: int


class Operations:
    """The installation's state, for the operator and the health checks."""

    def __init__(self, pool: ConnectionPool, reads: ReadRouter, searcher: Searcher,
                 database_url: str) -> None:
        self._pool = pool
        self._reads = reads
        self._searcher = searcher
        self._database_url = database_url

    def documents(self) -> list[IndexedDocument]:
        """The live index's documents, by path."""
        with self._pool.connection() as conn:
            return [IndexedDocument(*row) for row in conn.execute(query("list_documents"))]

    def failures(self) -> list[IngestionFailure]:
        """The files whose last ingest failed, with the stage and error of that failure."""
        with self._pool.connection() as conn:
            return open_failures(conn)

    def status(self) -> IndexStatus:
        """The live generation, a rebuild in progress, the index's counts and size."""
        with self._pool.connection() as conn:
            generations = list_generations(conn)
            model = recorded_model(conn)
            documents, chunks, failures, waiting, size = conn.execute(
                query("status_counts")).fetchone()
            groups = dict(conn.execute(query("status_groups")).fetchall())
        live = next((g for g in generations if g.state == "live"), None)
        building = next((g for g in reversed(generations) if g.state in _BUILDING), None)
        return IndexStatus(
            generation=None if live is None else IndexGeneration(
                live.id, live.state, model, live.pipeline_version),
            rebuild=None if building is None else IndexGeneration(
                building.id, building.state, None, building.pipeline_version),
            index=IndexCounts(documents=documents, chunks=chunks, failures=failures,
                              waiting_for_ocr=waiting, visible_to_nobody=groups.pop("", 0),
                              groups=groups),
            size_bytes=size)

    def index_model(self) -> str:
        """The embedding model of the index searched: the one recorded, else the one an
        empty index gets."""
        return self._reads.run(self._searcher.follow)

    @property
    def configured_model(self) -> str:
        """The embedding model an index with none recorded yet is searched with."""
        return self._searcher.configured

    def query_embedder(self, index_model: str) -> str:
        """The embedder that embeds questions for an index of `index_model`, made once
        (UnknownEmbedderError when none can be)."""
        return self._searcher.embedder_for(index_model).name

    def replica_status(self) -> list[ReplicaStatus]:
        """Each read replica's state: reachable, replay position against the fence."""
        return self._reads.status() if self._reads.replicas else []

    async def follow_index_changes(self) -> None:
        """Keep the read fence at every index change on the primary, until cancelled; while
        it does not run, only the primary answers. Nothing to follow without replicas."""
        if self._reads.replicas:
            await follow_index_changes(self._database_url, self._reads.fence)
