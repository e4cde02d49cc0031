"""`kb ingest`: the sensor's decisions for paths given on the shell, executed in this process
through the same asset graph, so the runs show in the Dagster UI like the sensor's."""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from pathlib import Path

import dagster as dg
import msgspec
import psycopg

from kb_core.database import connect
from kb_core.embeddings import make_embedder
from kb_core.generations import live_awaits_rebuild
from kb_core.index_model import check_index_model
from kb_core.queries import query
from kb_core.settings import Settings
from kb_pipeline.assets import INGEST_JOB, documents_partitions, raw_config
from kb_pipeline.batching import UNFINISHED, partition_ranges, range_tags
from kb_pipeline.catalogue import IngestPlan, forget_files, plan_files, plan_folder
from kb_pipeline.stages import pipeline_version

__all__ = [
    "IngestFailure",
    "IngestSummary",
    "fail_abandoned_runs",
    "ingest_paths",
    "process_tags",
    "sweep_staging",
]

log = logging.getLogger(__name__)

# The process that executes a run in-process, so a later `kb ingest` can tell a run whose
# process was killed from one still working: Dagster's default run launcher cannot check a
# run's worker, so a killed run stayed STARTED for ever, and the sensor, which leaves the files
# of active runs alone, never ingested its files again.
HOST_TAG = "kb/ingest_host"
PID_TAG = "kb/ingest_pid"
# How long `kb ingest` waits for a concurrent run that took over some of its files.
TAKEOVER_WAIT_S = 600.0


class IngestFailure(msgspec.Struct):
    source_uri: str
    error: str


class IngestSummary(msgspec.Struct):
    """The JSON `kb ingest --json` prints (DESIGN.md)."""

    documents: int
    ingested: int
    skipped: int
    deleted: int
    failed: list[IngestFailure]
    chunks: int
    warnings: list[str]


def ingest_paths(
    paths: list[Path],
    groups: tuple[str, ...] | None,
    settings: Settings,
    database_url: str,
    instance: dg.DagsterInstance,
    definitions: dg.Definitions,
) -> IngestSummary:
    """Ingest files and folders; folders are planned like watched folders (deletions included).
    Raises IndexModelMismatchError when the live index was built with another embedder."""
    embedder = make_embedder(settings.embedder)
    version = pipeline_version(embedder)
    fail_abandoned_runs(instance)
    plan = IngestPlan()
    with connect(database_url, autocommit=True) as conn:
        # Refused before any file is registered or run launched: every run would fail on it.
        check_index_model(conn, embedder)
        since = conn.execute(query("database_now")).fetchone()[0]
        sweep_staging(conn, instance)
        content_only = live_awaits_rebuild(conn, version)
        for path in paths:
            path = path.expanduser().resolve()
            # As in the sensor: an oversized file is refused from its size, never read.
            if path.is_dir():
                plan.merge(plan_folder(conn, path, version, groups, settings.max_file_bytes,
                                       content_only=content_only))
            elif path.is_file():
                plan.merge(plan_files(conn, path.parent, [path], version, groups,
                                      settings.max_file_bytes, content_only=content_only))
            else:
                plan.warnings.append(f"{path}: no such file or folder")
        forget_files(conn, plan.deleted)
        ordered = _sync_partitions(conn, instance, plan)

    job = definitions.resolve_job_def(INGEST_JOB.name)
    run_ids: list[str] = []
    broken_runs: list[str] = []
    own_tags = process_tags()
    for first, last in partition_ranges(ordered, plan.changed):
        result = job.execute_in_process(
            instance=instance,
            tags={**range_tags(first, last), **own_tags},
            run_config=raw_config(settings),
            raise_on_error=False,
        )
        run_ids.append(result.run_id)
        if not result.success:
            broken_runs.append(result.run_id)
    elsewhere = _await_other_runs(database_url, instance, plan.changed, run_ids)
    return _summarize(plan, database_url, since, run_ids, broken_runs, elsewhere)


def _sync_partitions(
    conn: psycopg.Connection, instance: dg.DagsterInstance, plan: IngestPlan
) -> list[str]:
    """Add the partitions of new files, delete those of files the catalogue no longer holds;
    return every partition key in Dagster's order."""
    name = documents_partitions.name
    existing = instance.get_dynamic_partitions(name)
    known = set(existing)
    new_keys = [k for k in dict.fromkeys(plan.seen) if k not in known]
    if new_keys:
        instance.add_dynamic_partitions(name, new_keys)
    # Not only this plan's deleted files: a process killed between forget_files and here left
    # partitions of forgotten files behind, and a run over a range holding one recorded the
    # deleted file as failing.
    for (key,) in conn.execute(query("unregistered_keys"), {"keys": existing}).fetchall():
        instance.delete_dynamic_partition(name, key)
    return instance.get_dynamic_partitions(name)


def process_tags() -> dict[str, str]:
    """The tags of a run this process executes in-process, for `fail_abandoned_runs`."""
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}


def fail_abandoned_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark as failed the unfinished in-process runs (`kb ingest`, `kb generation rebuild`)
    whose process on this host died; return their run ids."""
    host = socket.gethostname()
    abandoned = []
    # Every job this module or `kb generation rebuild` runs in-process carries the tags.
    runs = instance.get_runs(dg.RunsFilter(statuses=UNFINISHED, tags={HOST_TAG: host}))
    for run in runs:
        pid = int(run.tags.get(PID_TAG, "0"))
        if pid and not _process_alive(pid):
            instance.report_run_failed(run, f"the process that ran it (pid {pid}) died")
            abandoned.append(run.run_id)
    if abandoned:
        log.warning("marked %d runs of dead processes as failed", len(abandoned))
    return abandoned


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep_staging(conn: psycopg.Connection, instance: dg.DagsterInstance) -> None:
    """Drop staged versions left by finished runs (a killed run's, once marked failed): nothing
    will ever publish them, and a file reverted to its indexed bytes would keep its row for
    ever. Runs this instance does not know are left alone (another installation's)."""
    finished = []
    for (run_id,) in conn.execute(query("staging_runs")):
        run = instance.get_run_by_id(run_id)
        if run is not None and run.is_finished:
            finished.append(run_id)
    if finished:
        conn.execute(query("unstage_runs"), {"run_ids": finished})


def _await_other_runs(
    database_url: str, instance: dg.DagsterInstance, uris: list[str], own_runs: list[str],
    timeout_s: float = TAKEOVER_WAIT_S,
) -> dict[str, str]:
    """Wait while another live run (a concurrent `kb ingest`, or the sensor's) finishes files
    it took over from this ingest, so the summary reports their outcome; return the files still
    in its hands when the wait ends, with its run id."""
    deadline = time.monotonic() + timeout_s
    with connect(database_url, autocommit=True) as conn:
        while True:
            owners = {uri: run_id for uri, run_id in conn.execute(
                query("staging_runs_of"), {"uris": uris}) if run_id not in own_runs}
            active = {r for r in set(owners.values()) if _unfinished(instance, r)}
            if not active or time.monotonic() > deadline:
                return {uri: run_id for uri, run_id in owners.items() if run_id in active}
            time.sleep(1.0)
            fail_abandoned_runs(instance)


def _unfinished(instance: dg.DagsterInstance, run_id: str) -> bool:
    run = instance.get_run_by_id(run_id)
    return run is not None and not run.is_finished


def _summarize(
    plan: IngestPlan, database_url: str, since: dt.datetime, run_ids: list[str],
    broken_runs: list[str], elsewhere: dict[str, str],
) -> IngestSummary:
    with connect(database_url, autocommit=True) as conn:
        failures = dict(conn.execute(query("failures_of_runs"), {"run_ids": run_ids}).fetchall())
        # Files that failed before with the same bytes were not retried; say so again.
        failures.update(conn.execute(query("open_failures_of"), {"uris": plan.known_failing}))
        indexed = dict(conn.execute(
            query("chunk_counts"), {"uris": plan.changed, "since": since}).fetchall())
    failed = [IngestFailure(uri, error) for uri, error in sorted(failures.items())]
    for uri in plan.changed:
        if uri in elsewhere and uri not in failures:
            plan.warnings.append(f"{uri}: still being ingested by run {elsewhere[uri]}")
        elif uri not in failures and uri not in indexed:
            failed.append(IngestFailure(uri, f"ingest run failed ({', '.join(broken_runs)}); "
                                             "see the run's logs in Dagster"))
    ingested = [uri for uri in plan.changed if uri in indexed and uri not in failures]
    return IngestSummary(
        documents=len(set(plan.seen)),
        ingested=len(ingested),
        skipped=len(plan.unchanged),
        deleted=len(plan.deleted),
        failed=failed,
        chunks=sum(indexed[uri] for uri in ingested),
        warnings=plan.warnings,
    )
