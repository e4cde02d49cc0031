"""The embedding model an index was built with, recorded so two vector spaces never mix."""

from __future__ import annotations

import psycopg

from kb_core.embeddings import Embedder

__all__ = [
    "INDEX_DIM",
    "IndexModelMismatchError",
    "check_index_model",
    "record_index_model",
    "recorded_model",
    "recorded_model_async",
]

INDEX_DIM = 384  # chunks.embedding is vector(384) (sql/001_schema.sql)
_RECORDED = (
    "SELECT key, value FROM index_settings WHERE key IN ('embedding_model', 'embedding_dim')"
)


class IndexModelMismatchError(RuntimeError):
    """The configured embedder is not the one the index was built with."""


def _recorded(conn: psycopg.Connection) -> dict[str, str]:
    return dict(conn.execute(_RECORDED).fetchall())


def recorded_model(conn: psycopg.Connection) -> str | None:
    """The embedding model the index (the live one, or the generation on the search path) was
    built with; None while it holds nothing."""
    return _recorded(conn).get("embedding_model")


def check_index_model(conn: psycopg.Connection, embedder: Embedder) -> None:
    """Raise IndexModelMismatchError unless `embedder` may read and write this index."""
    if embedder.dim != INDEX_DIM:
        raise IndexModelMismatchError(
            f"embedder {embedder.name} gives {embedder.dim}-dimensional vectors; this index "
            f"stores {INDEX_DIM} dimensions"
        )
    recorded = _recorded(conn)
    model = recorded.get("embedding_model")
    if model is not None and model != embedder.name:
        raise IndexModelMismatchError(
            f"this index was built with embedder {model} ({recorded.get('embedding_dim')} "
            f"dimensions) and cannot be searched or extended with {embedder.name}: set "
            "KB_EMBEDDER back, or rebuild the index with the new model (`kb generation "
            "rebuild`, or the folder sensor under `kb up`)"
        )


async def recorded_model_async(conn: psycopg.AsyncConnection) -> str | None:
    """recorded_model for the service's async connections."""
    cur = await conn.execute(_RECORDED)
    return dict(await cur.fetchall()).get("embedding_model")


def record_index_model(conn: psycopg.Connection, embedder: Embedder) -> None:
    """Check the embedder against the index and record it if the index has none yet."""
    check_index_model(conn, embedder)
    conn.execute(
        "INSERT INTO index_settings (key, value) VALUES ('embedding_model', %s), "
        "('embedding_dim', %s) ON CONFLICT (key) DO NOTHING",
        (embedder.name, str(embedder.dim)),
    )
