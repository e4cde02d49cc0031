# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""The folder sensor: new, edited and deleted files in KB_DOCS_DIRS reach the index by
themselves, within one sensor interval; a pipeline change starts a gated rebuild."""


import dagster as dg
import psycopg

from kb_core.backups import record_rules_reread
from kb_core.generations import live_awaits_rebuild, refused_generation
from kb_core.index_model import IndexModelMismatchError, check_index_model
from kb_pipeline.catalogue import IngestPlan, forget_files, plan_folder
from kb_pipeline.defs.generations.jobs import GATE_JOB
from kb_pipeline.defs.generations.sensors import rebuild_requests
from kb_pipeline.defs.ingestion.jobs import INGEST_JOB
from kb_pipeline.defs.resources import (
    EmbedderResource,
    FoldersResource,
    GraphLlmResource,
    PostgresResource,
    running_version,
)
from kb_pipeline.defs.scans.jobs import READ_SCANS_JOB
from kb_pipeline.ocr import missing_engine
from kb_pipeline.ocr.cache import waiting_scans
from kb_pipeline.runs import (
    DOCUMENTS_PARTITIONS,
    UNFINISHED,
    fail_abandoned_runs,
    keys_in_runs,
    partition_changes,
    partition_ranges,
    range_tags,
    sweep_staging,
)

__all__ = ["SENSOR_INTERVAL_S", "docs_folder_sensor"]

SENSOR_INTERVAL_S = 15


@dg.sensor(
    jobs=[INGEST_JOB, READ_SCANS_JOB, GATE_JOB],
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def docs_folder_sensor(
    context: dg.SensorEvaluationContext, postgres: PostgresResource, embedder: EmbedderResource,
    graph_llm: GraphLlmResource, folders: FoldersResource,
) -> dg.SensorResult:
    """Watch KB_DOCS_DIRS: register new files, launch runs for changed ones (a few runs over
    ranges of partitions), re-permission documents whose access rule changed and remove deleted
    files from the index. Unchanged files launch nothing. Scans whose pages wait for OCR go to
    a read_scans run (one at a time), and are ingested again once it has read them. After a
    pipeline change, also drive the rebuild of every document into a new generation and its
    evaluation."""
    version = running_version(embedder, graph_llm)
    plan = IngestPlan()
    # A `kb ingest` killed mid-run leaves its runs unfinished and its versions staged: mark the
    # runs failed, so their files count as idle and are launched again, and drop the rows.
    fail_abandoned_runs(context.instance)
    with postgres.connection() as conn:
        sweep_staging(conn, context.instance)
        content_only = live_awaits_rebuild(conn, version)
        held = _held(conn, embedder, version)
        for root in folders.roots():
            # The size limit is applied here, from the files' sizes: an oversized file
            # launches no run and is not re-read on every tick.
            plan.merge(plan_folder(conn, root, version, max_bytes=folders.max_file_bytes(),
                                   content_only=content_only))
        forget_files(conn, plan.deleted)
        # Every watched folder's access rules read again: a restored installation is ready.
        record_rules_reread(conn)
        partitions = partition_changes(conn, context.instance, plan.seen)
        scans = waiting_scans(conn)
    for warning in plan.warnings:
        context.log.warning(warning)

    ordered = partitions.ordered
    busy = keys_in_runs(context.instance, INGEST_JOB.name, ordered)
    todo = [] if held else [k for k in plan.changed if k not in busy and k not in scans]
    if held:
        context.log.warning(f"{held}: {len(plan.changed)} new or edited files wait")
    with postgres.connection() as conn:
        rebuild_runs, generation_partitions = rebuild_requests(
            context, conn, version, ordered, folders.max_file_bytes())
    run_requests = (_ingest_requests(ordered, todo) + _read_scans_requests(context, ordered, scans)
                    + rebuild_runs)
    requests: list = []
    if partitions.added:
        requests.append(DOCUMENTS_PARTITIONS.build_add_request(partitions.added))
    if partitions.deleted:
        requests.append(DOCUMENTS_PARTITIONS.build_delete_request(partitions.deleted))
    requests += generation_partitions
    summary = (
        f"{len(plan.seen)} files: {len(todo)} to ingest in {len(run_requests)} runs, "
        f"{len(plan.unchanged)} unchanged, {len(plan.known_failing)} known failing, "
        f"{len(busy & set(plan.changed))} already in progress, {len(scans)} waiting for OCR, "
        f"{len(plan.deleted)} deleted, {len(plan.regrouped)} re-permissioned"
    )
    context.log.info(summary)
    if not run_requests and not requests:
        return dg.SensorResult(skip_reason=summary)
    return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=requests)


def _ingest_requests(ordered: list[str], todo: list[str]) -> list[dg.RunRequest]:
    """The ingest runs of the new and edited files, each over a range of partitions."""
    return [dg.RunRequest(job_name=INGEST_JOB.name, tags=range_tags(first, last))
            for first, last in partition_ranges(ordered, todo)]


def _read_scans_requests(
    context: dg.SensorEvaluationContext, ordered: list[str], scans: set[str]
) -> list[dg.RunRequest]:
    """One read_scans run over the scans waiting for OCR, unless one is on its way or the
    engine is not installed (they wait for it: the first tick after installation reads them)."""
    waiting = [key for key in ordered if key in scans]
    if not waiting:
        return []
    missing = missing_engine()
    if missing:
        context.log.warning(f"{len(waiting)} scans wait: {missing}")
        return []
    if context.instance.get_run_ids(
            dg.RunsFilter(job_name=READ_SCANS_JOB.name, statuses=UNFINISHED), limit=1):
        return []
    return [dg.RunRequest(job_name=READ_SCANS_JOB.name, tags=range_tags(first, last))
            for first, last in partition_ranges(ordered, waiting)]


def _held(conn: psycopg.Connection, embedder: EmbedderResource, version: str) -> str | None:
    """Why edited files cannot reach the live generation now, if they cannot: it was built
    with another embedding model (only the rebuilt generation can take them), or the running
    pipeline's generation was refused, so its parser or chunker is not to be trusted with
    them either (a fixed pipeline rebuilds again; a rollback re-ingests what it touched)."""
    refused = refused_generation(conn, version)
    if refused is not None:
        return (f"generation {refused.id}, built by the running pipeline, was {refused.state}"
                f" ({refused.note})")
    try:
        check_index_model(conn, embedder.get())
    except IndexModelMismatchError as exc:
        return str(exc)
    return None
