"""Which files a watched folder holds, and which of them need ingesting, re-permissioning or
removing: the decisions the sensor and `kb ingest` make before any run is launched."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from kb_core.queries import query
from kb_pipeline.access import ACCESS_FILE, AccessError, resolve_access
from kb_pipeline.parsing import SUPPORTED_SUFFIXES

__all__ = [
    "IngestPlan",
    "display_path",
    "file_checksum",
    "file_mtime",
    "forget_files",
    "oversize_error",
    "plan_files",
    "plan_folder",
    "scan_folder",
]

log = logging.getLogger(__name__)

# Dagster refuses these inside partition keys.
_INVALID_KEY_PARTS = ("...", "\a", "\b", "\f", "\n", "\r", "\t", "\v", "\0")


@dataclass
class IngestPlan:
    """What one look at a folder (or a list of files) decided."""

    seen: list[str] = field(default_factory=list)  # every ingestible file, as source_uri
    changed: list[str] = field(default_factory=list)  # to (re)process
    unchanged: list[str] = field(default_factory=list)
    known_failing: list[str] = field(default_factory=list)  # failed before with these bytes
    deleted: list[str] = field(default_factory=list)
    regrouped: list[str] = field(default_factory=list)  # groups changed in place
    warnings: list[str] = field(default_factory=list)

    def merge(self, other: IngestPlan) -> None:
        for name in self.__dataclass_fields__:
            getattr(self, name).extend(getattr(other, name))


def display_path(root: Path, file: Path) -> str:
    """A document's path for people: relative to its watched folder, prefixed with its name.

    NFC-normalized: files saved from a Mac keep decomposed names (「カ\u3099イト\u3099」 for
    ガイド) that look the same but match nothing people type; `source_uri` keeps the real name.
    """
    return unicodedata.normalize("NFC", f"{root.name}/{file.relative_to(root).as_posix()}")


def oversize_error(size: int, max_bytes: int) -> str:
    """The recorded error of a file over KB_MAX_FILE_MB (decided from its size alone)."""
    return (
        f"file is {size / 2**20:.1f} MB, over the limit of {max_bytes / 2**20:.0f} MB "
        "(KB_MAX_FILE_MB)"
    )


def file_checksum(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def file_mtime(stat: os.stat_result) -> dt.datetime:
    # Microseconds: what timestamptz keeps, so a stored mtime compares equal to a fresh stat.
    return dt.datetime.fromtimestamp(stat.st_mtime_ns // 1000 / 1e6, tz=dt.UTC)


def scan_folder(root: Path, warnings: list[str]) -> list[Path]:
    """Ingestible files under `root`, sorted; symlinks leading outside `root` are refused."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            file = Path(folder) / name
            if name.startswith(".") or name == ACCESS_FILE:
                continue
            if file.suffix.lower() not in SUPPORTED_SUFFIXES:
                continue
            if file.is_symlink():
                try:
                    target = file.resolve(strict=True)
                except (OSError, RuntimeError) as exc:
                    warnings.append(f"{file}: broken or looping symlink ({exc})")
                    continue
                if root.resolve() not in target.parents:
                    warnings.append(f"{file}: symlink leads outside the watched folder; skipped")
                    continue
            if not _is_utf8(str(file)):
                # A name in Shift_JIS bytes (a ZIP unpacked on Linux) decodes to surrogates,
                # which no database, log or JSON can carry: it used to fail the whole sensor tick.
                warnings.append(f"{os.fsencode(file)!r}: file name is not valid UTF-8; skipped")
                continue
            if any(part in str(file) for part in _INVALID_KEY_PARTS):
                warnings.append(f"{file!s:.200}: file name contains characters that cannot name a "
                                "document (control characters or '...'); skipped")
                continue
            found.append(file)
    return found


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def plan_folder(
    conn: psycopg.Connection,
    root: Path,
    pipeline_version: str,
    fallback_groups: tuple[str, ...] | None = None,
    max_bytes: int | None = None,
    *,
    content_only: bool = False,
) -> IngestPlan:
    """Plan a whole watched folder: new, changed and deleted files, and changed access rules.

    A missing or empty folder (an unmounted share looks like one) deletes nothing.
    `content_only`: see plan_files.
    """
    plan = IngestPlan()
    if not root.is_dir():
        plan.warnings.append(f"watched folder {root} is missing; nothing deleted, waiting")
        return plan
    files = scan_folder(root, plan.warnings)
    known = {row[0] for row in conn.execute(query("sources_under_root"), {"root": str(root)})}
    if not files and known:
        plan.warnings.append(
            f"watched folder {root} is empty but {len(known)} documents were indexed from it "
            "(unmounted share?); nothing deleted, waiting"
        )
        return plan
    plan.merge(plan_files(conn, root, files, pipeline_version, fallback_groups, max_bytes,
                          content_only=content_only))
    plan.deleted = sorted(known - {str(f) for f in files})
    return plan


def plan_files(
    conn: psycopg.Connection,
    root: Path,
    files: list[Path],
    pipeline_version: str,
    fallback_groups: tuple[str, ...] | None = None,
    max_bytes: int | None = None,
    *,
    content_only: bool = False,
) -> IngestPlan:
    """Register `files` under `root` and decide for each whether it needs ingesting.

    A file over `max_bytes` is refused here from its size alone, before anything reads it.
    With `content_only` (the live generation awaits a rebuild for a new pipeline version), a
    document indexed by another pipeline version is current while its bytes are unchanged.
    """
    plan = IngestPlan()
    uris = [str(f) for f in files]
    conn.execute(
        query("register_sources"),
        {
            "uris": uris,
            "paths": [display_path(root, f) for f in files],
            "root": str(root),
            "fallback": list(fallback_groups) if fallback_groups else None,
        },
    )
    state = {row[0]: row[1:] for row in conn.execute(
        query("document_state"), {"uris": uris, "version": pipeline_version}
    )}
    for file in files:
        uri = str(file)
        plan.seen.append(uri)
        try:
            stat = file.stat()
        except OSError as exc:
            plan.warnings.append(f"{file}: {exc.strerror}; skipped this time")
            continue
        (checksum, size, mtime, version, groups, rule, failed_checksum,
         fallback) = state.get(uri, (None,) * 8)
        if checksum is not None:
            # Access applies to the live version whatever its file's bytes are doing now: a
            # changed, failing or oversized file's last good version must not keep a revoked
            # group until a run (which may never succeed) replaces it.
            _regroup(conn, file, root, tuple(groups), rule, fallback, plan)
        if max_bytes is not None and stat.st_size > max_bytes:
            # Its bytes are never hashed (that would read all of a 200 MB file on every tick):
            # the failure is keyed by size and mtime, so it is retried once the file is rewritten.
            fingerprint = f"unread:{stat.st_size}:{stat.st_mtime_ns}"
            _refuse(conn, root, file, pipeline_version, plan,
                    oversize_error(stat.st_size, max_bytes), fingerprint,
                    recorded=failed_checksum == fingerprint)
            continue
        if checksum is not None or failed_checksum is not None:
            same_stat = size == stat.st_size and mtime == file_mtime(stat)
            current = checksum if same_stat and checksum else file_checksum(file)
            if current == checksum and (content_only or version == pipeline_version):
                plan.unchanged.append(uri)
                if not same_stat:
                    conn.execute(query("touch_document"), {"uri": uri, "mtime": file_mtime(stat)})
                continue
            if current == failed_checksum:
                plan.known_failing.append(uri)
                continue
        if not _access_refused(conn, root, file, fallback, pipeline_version, plan):
            plan.changed.append(uri)
    return plan


def stale_documents(
    conn: psycopg.Connection, pipeline_version: str, max_bytes: int | None = None
) -> list[str]:
    """Catalogued files whose current bytes the index on `conn`'s search path does not hold
    and that are not known to fail with them: what a rebuilt generation still has to ingest.
    Deleted, unreadable and oversized files are left to the live generation's planning."""
    uris = [row[0] for row in conn.execute(query("catalogue_sources"))]
    stale = []
    for uri, checksum, size, mtime, *_, failed_checksum, _ in conn.execute(
            query("document_state"), {"uris": uris, "version": pipeline_version}).fetchall():
        file = Path(uri)
        try:
            stat = file.stat()
        except OSError:
            continue
        if max_bytes is not None and stat.st_size > max_bytes:
            continue
        if checksum is not None and size == stat.st_size and mtime == file_mtime(stat):
            continue
        current = file_checksum(file)
        if current == checksum:
            conn.execute(query("touch_document"), {"uri": uri, "mtime": file_mtime(stat)})
        elif current != failed_checksum:
            stale.append(uri)
    return stale


def _access_refused(
    conn: psycopg.Connection,
    root: Path,
    file: Path,
    fallback: list[str] | None,
    pipeline_version: str,
    plan: IngestPlan,
) -> bool:
    """Whether `file`'s access rule cannot be resolved; if so its failure is recorded once.

    A run could only fail on it; launching one on every tick until someone fixes the access
    file would only fill the run history. Fixing the rule makes the file ingestible again on
    the next tick, as it then resolves.
    """
    try:
        resolve_access(file, root, tuple(fallback) if fallback else None)
    except AccessError as exc:
        last = conn.execute(query("open_failures_of"), {"uris": [str(file)]}).fetchone()
        _refuse(conn, root, file, pipeline_version, plan, str(exc), None,
                recorded=last is not None and last[1] == str(exc))
        return True
    return False


def _refuse(
    conn: psycopg.Connection,
    root: Path,
    file: Path,
    pipeline_version: str,
    plan: IngestPlan,
    error: str,
    checksum: str | None,
    recorded: bool,
) -> None:
    """Decide `file` as failing without launching a run; record the failure unless its last
    open failure already says the same (`recorded`), so each tick does not add a row."""
    plan.known_failing.append(str(file))
    if recorded:
        return
    conn.execute(
        query("record_failure"),
        {"uri": str(file), "path": display_path(root, file), "checksum": checksum,
         "stage": "raw_documents", "version": pipeline_version, "error": error, "run_id": None,
         "skipped": False},
    )


def _regroup(
    conn: psycopg.Connection,
    file: Path,
    root: Path,
    groups: tuple[str, ...],
    rule: str | None,
    fallback: list[str] | None,
    plan: IngestPlan,
) -> None:
    """Apply an edited access rule to an indexed document in place: no parsing, no embedding."""
    try:
        access = resolve_access(file, root, tuple(fallback) if fallback else None)
    except AccessError as exc:
        # An unreadable rule must not widen or keep access by accident: visible to nobody.
        plan.warnings.append(f"{exc}; documents under it are hidden until it is fixed")
        access_groups, access_rule = (), None
    else:
        access_groups, access_rule = access.groups, access.rule
    if tuple(sorted(groups)) != access_groups or rule != access_rule:
        with conn.transaction():
            conn.execute(query("lock_keyword_stats"))  # it moves the keyword statistics
            conn.execute(
                query("regroup_document"),
                {"uri": str(file), "groups": list(access_groups), "rule": access_rule},
            )
        plan.regrouped.append(str(file))


def forget_files(conn: psycopg.Connection, uris: list[str]) -> None:
    """Remove deleted files from the index (and so from its keyword statistics), the catalogue
    and staging."""
    if not uris:
        return
    with conn.transaction():
        conn.execute(query("lock_keyword_stats"))
        conn.execute(query("forget_sources"), {"uris": uris})
