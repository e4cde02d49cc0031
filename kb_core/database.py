"""One connection to the kb database, with pgvector's types registered. The server it runs on
is kb_core.database_server's."""

from __future__ import annotations

import psycopg
from pgvector.psycopg import register_vector

__all__ = ["connect"]


def connect(url: str, **kwargs: object) -> psycopg.Connection:
    """One connection with pgvector's types registered (the extension must exist: migrate first)."""
    conn = psycopg.connect(url, **kwargs)
    register_vector(conn)
    return conn
