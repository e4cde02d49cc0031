"""The query log's retention: entries older than the retention are dropped, by the service
each day and by a restore (a backup can hold questions past it), through this one purge."""

from __future__ import annotations

import psycopg

from kb_core.queries import query

__all__ = ["purge_query_log"]


def purge_query_log(conn: psycopg.Connection, days: int) -> int:
    """Drop the entries older than `days` (questions can hold personal data); how many."""
    return conn.execute(query("purge_query_log"), {"days": days}).rowcount
