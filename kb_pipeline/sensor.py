"""The folder sensor: new, edited and deleted files in KB_DOCS_DIRS reach the index by
themselves, within one sensor interval."""


import dagster as dg

from kb_core.settings import Settings
from kb_pipeline.assets import documents_partitions
from kb_pipeline.batching import keys_in_runs, partition_ranges, range_tags
from kb_pipeline.catalogue import IngestPlan, forget_files, plan_folder
from kb_pipeline.resources import EmbedderResource, PostgresResource
from kb_pipeline.stages import pipeline_version

__all__ = ["INGEST_JOB", "SENSOR_INTERVAL_S", "docs_folder_sensor", "raw_config"]

SENSOR_INTERVAL_S = 15

INGEST_JOB = dg.define_asset_job(
    "ingest_documents",
    selection=dg.AssetSelection.groups("ingestion"),
    partitions_def=documents_partitions,
    description="Parse, chunk, embed and index changed documents.",
)


def raw_config(settings: Settings) -> dict:
    return {"ops": {"raw_documents": {"config": {"max_file_mb": settings.max_file_bytes >> 20}}}}


@dg.sensor(
    job=INGEST_JOB,
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def docs_folder_sensor(
    context: dg.SensorEvaluationContext, postgres: PostgresResource, embedder: EmbedderResource
) -> dg.SensorResult:
    """Watch KB_DOCS_DIRS: register new files, launch runs for changed ones (a few runs over
    ranges of partitions), re-permission documents whose access rule changed and remove deleted
    files from the index. Unchanged files launch nothing."""
    from kb_pipeline.ingest import fail_abandoned_runs, sweep_staging  # it imports this module

    settings = Settings.from_env()
    version = pipeline_version(embedder.get())
    plan = IngestPlan()
    # A `kb ingest` killed mid-run leaves its runs unfinished and its versions staged: mark the
    # runs failed, so their files count as idle and are launched again, and drop the rows.
    fail_abandoned_runs(context.instance)
    with postgres.connection() as conn:
        sweep_staging(conn, context.instance)
        for root in settings.docs_dirs:
            # The size limit is applied here, from the files' sizes: an oversized file
            # launches no run and is not re-read on every tick.
            plan.merge(plan_folder(conn, root, version, max_bytes=settings.max_file_bytes))
        forget_files(conn, plan.deleted)
    for warning in plan.warnings:
        context.log.warning(warning)

    name = documents_partitions.name
    existing = context.instance.get_dynamic_partitions(name)
    existing_set = set(existing)
    new_keys = [k for k in plan.seen if k not in existing_set]
    gone = [k for k in plan.deleted if k in existing_set]
    ordered = [k for k in existing if k not in set(plan.deleted)] + new_keys
    busy = keys_in_runs(context.instance, INGEST_JOB.name, ordered)
    todo = [k for k in plan.changed if k not in busy]
    run_requests = [
        dg.RunRequest(tags=range_tags(first, last), run_config=raw_config(settings))
        for first, last in partition_ranges(ordered, todo)
    ]
    requests: list = []
    if new_keys:
        requests.append(documents_partitions.build_add_request(new_keys))
    if gone:
        requests.append(documents_partitions.build_delete_request(gone))
    summary = (
        f"{len(plan.seen)} files: {len(todo)} to ingest in {len(run_requests)} runs, "
        f"{len(plan.unchanged)} unchanged, {len(plan.known_failing)} known failing, "
        f"{len(busy & set(plan.changed))} already in progress, {len(plan.deleted)} deleted, "
        f"{len(plan.regrouped)} re-permissioned"
    )
    context.log.info(summary)
    if not run_requests and not requests:
        return dg.SensorResult(skip_reason=summary)
    return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=requests)
