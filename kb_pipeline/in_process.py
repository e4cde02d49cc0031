"""The in-process drivers: `kb ingest` (the sensor's decisions for paths given on the shell) and
`kb generation rebuild`, driven from this process through the same asset graph, so their runs
show in the Dagster UI like the sensor's (executed two at a time by worker processes when there
are several: kb_pipeline/run_workers.py)."""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path

import dagster as dg
import msgspec
import psycopg

from kb_core.database import connect
from kb_core.embeddings import make_embedder
from kb_core.embeddings.pool import EmbeddingPool
from kb_core.generations import (
    Generation,
    claimed,
    create_generation,
    generation,
    live_awaits_rebuild,
    mark_round_launched,
    set_state,
)
from kb_core.index_model import check_index_model
from kb_core.ingestion_failures import failures_of_runs
from kb_core.progress import report
from kb_core.queries import query
from kb_core.settings import Settings
from kb_pipeline.catalogue import IngestPlan, forget_files, plan_files, plan_folder
from kb_pipeline.definitions import make_definitions
from kb_pipeline.defs.generations.jobs import GATE_JOB
from kb_pipeline.defs.run_logging import IN_PROCESS_LOGGING
from kb_pipeline.defs.scans.jobs import READ_SCANS_JOB
from kb_pipeline.graph_llm import make_graph_extractor
from kb_pipeline.ocr import missing_engine
from kb_pipeline.ocr.cache import waiting_scans
from kb_pipeline.rebuilds import stale_keys
from kb_pipeline.run_workers import execute_runs
from kb_pipeline.runs import (
    DOCUMENTS_PARTITIONS,
    GENERATION_TAG,
    GENERATIONS_PARTITIONS,
    MAX_REBUILT_PER_RUN,
    PartitionChanges,
    apply_partition_changes,
    fail_abandoned_runs,
    partition_changes,
    partition_ranges,
    process_tags,
    range_tags,
    rebuild_tags,
    sweep_staging,
)
from kb_pipeline.stages import pipeline_version

__all__ = [
    "IngestFailure", "IngestSummary", "ingest_paths", "rebuild_in_process", "register_paths",
]

log = logging.getLogger(__name__)

# How long `kb ingest` waits for a concurrent run that took over some of its files.
TAKEOVER_WAIT_S = 600.0


class IngestFailure(msgspec.Struct):
    source_uri: str
    error: str


class IngestSummary(msgspec.Struct):
    """The JSON `kb ingest --json` prints (docs/getting-started.md)."""

    documents: int
    ingested: int
    skipped: int
    deleted: int
    failed: list[IngestFailure]
    chunks: int
    warnings: list[str]
    without_text: list[IngestFailure]  # scans where OCR found no text: skipped, no error
    waiting_for_ocr: list[str]  # scans whose pages wait for the OCR engine to be installed


def ingest_paths(
    paths: list[Path],
    groups: tuple[str, ...] | None,
    settings: Settings,
    instance: dg.DagsterInstance,
) -> IngestSummary:
    """Ingest files and folders into the database of `settings` (its URL resolved); folders
    are planned like watched folders (deletions included). Raises IndexModelMismatchError when
    the live index was built with another embedder, EmbeddingPoolError when the servers of
    KB_EMBED_URLS cannot embed for this one, and ChatConfigError when KB_GRAPH_LLM names a
    provider without its key."""
    database_url = _database_url(settings)
    embedder = make_embedder(settings.embedder)
    # A missing key refused here, naming it, rather than in every run's entity_graph step.
    make_graph_extractor(settings.graph_llm)
    fail_abandoned_runs(instance)
    with connect(database_url, autocommit=True) as conn:
        # Refused before any file is registered or run launched: every run would fail on it.
        check_index_model(conn, embedder)
        since = conn.execute(query("database_now")).fetchone()[0]
        sweep_staging(conn, instance)
        plan, partitions = register_paths(
            conn, instance, paths, groups, settings,
            pipeline_version(embedder, settings.graph_llm))
    report("files", count=len(set(plan.seen)))
    report("unchanged", count=len(plan.unchanged))
    report("deleted", count=len(plan.deleted))
    for uri in plan.known_failing:  # not retried: they count as failed again
        report("failed", uri)
    if plan.changed and isinstance(embedder, EmbeddingPool):
        # Refused here, naming the server, rather than in every run's embedding step.
        embedder.probe()

    runs = execute_runs(settings, instance, [
        range_tags(first, last)
        for first, last in partition_ranges(partitions.ordered, plan.changed)])
    # Scans the runs handed to OCR: read their pages, then ingest them from the cache.
    runs += _read_scans(settings, instance, database_url, partitions.ordered, plan.changed)
    run_ids = [run_id for run_id, _ in runs]
    broken_runs = [run_id for run_id, success in runs if not success]
    elsewhere = _await_other_runs(database_url, instance, plan.changed, run_ids)
    return _summarize(plan, database_url, since, run_ids, broken_runs, elsewhere)


def _read_scans(settings: Settings, instance: dg.DagsterInstance, database_url: str,
                ordered: list[str], uris: list[str]) -> list[tuple[str, bool]]:
    """The read_scans runs over `uris` waiting for OCR, then the ingest runs that take them
    from the cache; none while the engine is not installed (they stay waiting)."""
    with connect(database_url, autocommit=True) as conn:
        scans = waiting_scans(conn) & set(uris)
    if not scans or missing_engine():
        return []
    job = make_definitions(settings).resolve_job_def(READ_SCANS_JOB.name)
    ranges = [range_tags(first, last) for first, last in partition_ranges(ordered, scans)]
    runs = []
    for tags in ranges:
        result = job.execute_in_process(
            instance=instance, tags={**tags, **process_tags()}, run_config=IN_PROCESS_LOGGING,
            raise_on_error=False)
        runs.append((result.run_id, result.success))
    return runs + execute_runs(settings, instance, ranges)


def register_paths(
    conn: psycopg.Connection, instance: dg.DagsterInstance, paths: list[Path],
    groups: tuple[str, ...] | None, settings: Settings, version: str,
) -> tuple[IngestPlan, PartitionChanges]:
    """Plan files and folders like watched folders (deletions included) for pipeline
    `version`, and bring the catalogue and the documents partitions up to date with them;
    nothing is ingested."""
    content_only = live_awaits_rebuild(conn, version)
    plan = IngestPlan()
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
    partitions = partition_changes(conn, instance, plan.seen)
    apply_partition_changes(instance, partitions)
    return plan, partitions


def rebuild_in_process(settings: Settings, instance: dg.DagsterInstance) -> Generation:
    """`kb generation rebuild`: a new generation for the current pipeline, built, evaluated and
    (if its gates pass) published in this process, as the sensor would; the sensor leaves it
    alone meanwhile."""
    version = pipeline_version(make_embedder(settings.embedder), settings.graph_llm)
    keys = instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS.name)
    with connect(_database_url(settings), autocommit=True) as conn:
        gen = create_generation(conn, version)
        with claimed(conn, gen.id):
            while stale := stale_keys(conn, generation(conn, gen.id), version,
                                       settings.max_file_bytes, keys):
                mark_round_launched(conn, gen.id)
                report("files", count=len(stale))
                execute_runs(settings, instance, [
                    rebuild_tags(gen.id, first, last)
                    for first, last in partition_ranges(keys, stale, MAX_REBUILT_PER_RUN)])
            set_state(conn, gen.id, "evaluating")
            instance.add_dynamic_partitions(GENERATIONS_PARTITIONS.name, [str(gen.id)])
            make_definitions(settings).resolve_job_def(GATE_JOB.name).execute_in_process(
                instance=instance, partition_key=str(gen.id), run_config=IN_PROCESS_LOGGING,
                tags={GENERATION_TAG: str(gen.id), **process_tags()}, raise_on_error=False)
        return generation(conn, gen.id)


def _database_url(settings: Settings) -> str:
    if not settings.database_url:
        raise ValueError("resolve the database URL first (kb_core.migrations.prepare_database)")
    return settings.database_url


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
    failures = failures_of_runs(database_url, run_ids)
    with connect(database_url, autocommit=True) as conn:
        blank = dict(conn.execute(
            query("skipped_of"), {"uris": plan.changed + plan.known_failing}).fetchall())
        waiting = waiting_scans(conn) & set(plan.changed)
        # Files that failed before with the same bytes were not retried; say so again.
        failures.update(conn.execute(query("open_failures_of"), {"uris": plan.known_failing}))
        indexed = dict(conn.execute(
            query("chunk_counts"), {"uris": plan.changed, "since": since}).fetchall())
    failed = [IngestFailure(uri, error) for uri, error in sorted(failures.items())]
    if waiting:
        plan.warnings.append(
            f"{len(waiting)} scans wait for OCR: {missing_engine() or 'not read yet'}; the "
            "folder sensor reads them once it can")
    for uri in plan.changed:
        if uri in blank or uri in waiting:
            continue
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
        without_text=[IngestFailure(uri, reason) for uri, reason in sorted(blank.items())],
        waiting_for_ocr=sorted(waiting),
    )
