"""Numbered SQL migrations from sql/, each applied once, in order, and recorded; and the
database a command or run works on, prepared: the embedded server started when needed (or
KB_DATABASE_URL), migrated."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import psycopg

from kb_core.database_server import database_url
from kb_core.settings import REPO_ROOT, Settings

__all__ = ["SQL_DIR", "migrate", "pending_migrations", "prepare_database"]

log = logging.getLogger(__name__)

SQL_DIR = REPO_ROOT / "sql"
_MIGRATION = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
# Any fixed number: it keeps two processes from migrating the same database at once.
_LOCK_ID = 72_190_001


def _migration_files() -> list[Path]:
    return sorted(p for p in SQL_DIR.iterdir() if _MIGRATION.match(p.name))


def pending_migrations(conn: psycopg.Connection) -> list[str]:
    """Names of migrations not yet applied to this database."""
    applied = _applied(conn)
    return [p.name for p in _migration_files() if p.name not in applied]


def _applied(conn: psycopg.Connection) -> set[str]:
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return set()
    return {row[0] for row in conn.execute("SELECT name FROM schema_migrations")}


def migrate(url: str) -> list[str]:
    """Apply every pending migration, each in its own transaction; return the names applied."""
    applied_now: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_ID,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for name in pending_migrations(conn):
                script = (SQL_DIR / name).read_text(encoding="utf-8")
                with conn.transaction():
                    # A whole file is one simple-query batch: no splitting on ';'.
                    conn.execute(script.encode())
                    conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (name,))
                log.info("applied migration %s", name)
                applied_now.append(name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
    return applied_now


def prepare_database(settings: Settings) -> Settings:
    """`settings` with the database URL resolved, once the server runs and is migrated."""
    url = database_url(settings)
    migrate(url)  # logs each migration it applies
    return dataclasses.replace(settings, database_url=url)
