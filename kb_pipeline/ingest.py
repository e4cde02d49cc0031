"""`kb ingest`: the sensor's decisions for paths given on the shell, executed in this process
through the same asset graph, so the runs show in the Dagster UI like the sensor's."""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg
import msgspec

from kb_core.database import connect
from kb_core.embeddings import make_embedder
from kb_core.queries import query
from kb_core.settings import Settings
from kb_pipeline.assets import documents_partitions
from kb_pipeline.batching import partition_ranges, range_tags
from kb_pipeline.catalogue import IngestPlan, forget_files, plan_files, plan_folder
from kb_pipeline.sensor import INGEST_JOB, raw_config
from kb_pipeline.stages import pipeline_version

__all__ = ["IngestFailure", "IngestSummary", "ingest_paths"]

log = logging.getLogger(__name__)


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
    """Ingest files and folders; folders are planned like watched folders (deletions included)."""
    version = pipeline_version(make_embedder(settings.embedder))
    plan = IngestPlan()
    with connect(database_url, autocommit=True) as conn:
        for path in paths:
            path = path.expanduser().resolve()
            if path.is_dir():
                plan.merge(plan_folder(conn, path, version, groups))
            elif path.is_file():
                plan.merge(plan_files(conn, path.parent, [path], version, groups))
            else:
                plan.warnings.append(f"{path}: no such file or folder")
        forget_files(conn, plan.deleted)

    name = documents_partitions.name
    existing = set(instance.get_dynamic_partitions(name))
    new_keys = [k for k in dict.fromkeys(plan.seen) if k not in existing]
    if new_keys:
        instance.add_dynamic_partitions(name, new_keys)
    for key in plan.deleted:
        if key in existing:
            instance.delete_dynamic_partition(name, key)
    ordered = instance.get_dynamic_partitions(name)

    job = definitions.resolve_job_def(INGEST_JOB.name)
    run_ids: list[str] = []
    broken_runs: list[str] = []
    for first, last in partition_ranges(ordered, plan.changed):
        result = job.execute_in_process(
            instance=instance,
            tags=range_tags(first, last),
            run_config=raw_config(settings),
            raise_on_error=False,
        )
        run_ids.append(result.run_id)
        if not result.success:
            broken_runs.append(result.run_id)
    return _summarize(plan, database_url, run_ids, broken_runs)


def _summarize(
    plan: IngestPlan, database_url: str, run_ids: list[str], broken_runs: list[str]
) -> IngestSummary:
    with connect(database_url, autocommit=True) as conn:
        failures = dict(conn.execute(query("failures_of_runs"), {"run_ids": run_ids}).fetchall())
        # Files that failed before with the same bytes were not retried; say so again.
        failures.update(conn.execute(query("open_failures_of"), {"uris": plan.known_failing}))
        indexed = dict(conn.execute(query("chunk_counts"), {"uris": plan.changed}).fetchall())
    failed = [IngestFailure(uri, error) for uri, error in sorted(failures.items())]
    for uri in plan.changed:
        if uri not in failures and uri not in indexed:
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
