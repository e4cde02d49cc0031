"""The folder sensor's part in rebuilds (kb_pipeline/defs/watched_folders/sensors.py calls it on
each tick): a new generation when the pipeline changed, its build rounds of ingest runs, then
the run that evaluates and publishes it."""

import dagster as dg
import psycopg

from kb_core.generations import (
    create_generation,
    discard_generation,
    is_claimed,
    list_generations,
    mark_round_launched,
    rebuild_needed,
    set_state,
)
from kb_pipeline.defs.generations.assets import published_generation
from kb_pipeline.defs.generations.jobs import GATE_JOB
from kb_pipeline.defs.ingestion.jobs import INGEST_JOB
from kb_pipeline.ocr import missing_engine
from kb_pipeline.ocr.cache import waiting_scans
from kb_pipeline.rebuilds import stale_keys
from kb_pipeline.runs import (
    GENERATION_TAG,
    GENERATIONS_PARTITIONS,
    MAX_REBUILT_PER_RUN,
    generation_running,
    partition_ranges,
    rebuild_tags,
)

__all__ = ["rebuild_requests"]


def rebuild_requests(
    context: dg.SensorEvaluationContext, conn: psycopg.Connection, version: str,
    keys: list[str], max_file_bytes: int,
) -> tuple[list[dg.RunRequest], list]:
    """The sensor's part in rebuilds: runs to request and generation partitions to add."""
    if keys and rebuild_needed(conn, version):
        gen = create_generation(conn, version)
        context.log.info("pipeline changed to %s: rebuilding into generation %d", version, gen.id)
    runs, partitions = [], []
    for gen in list_generations(conn):
        if gen.state not in ("building", "evaluating", "passed"):
            continue
        if generation_running(context.instance, gen.id) or is_claimed(conn, gen.id):
            continue
        if gen.pipeline_version != version:  # the pipeline changed again meanwhile
            discard_generation(conn, gen.id, f"superseded by pipeline {version}")
        elif gen.state == "building":
            stale = stale_keys(conn, gen, version, max_file_bytes, keys)
            scans = waiting_scans(conn)
            if stale and all(key in scans for key in stale) and not missing_engine():
                continue  # the folder sensor's read_scans run reads them; a round takes them
            if stale:
                runs += [dg.RunRequest(job_name=INGEST_JOB.name,
                                       tags=rebuild_tags(gen.id, first, last))
                         for first, last in partition_ranges(keys, stale, MAX_REBUILT_PER_RUN)]
                mark_round_launched(conn, gen.id)
                continue
            set_state(conn, gen.id, "evaluating")
            partitions.append(GENERATIONS_PARTITIONS.build_add_request([str(gen.id)]))
            runs.append(dg.RunRequest(job_name=GATE_JOB.name, partition_key=str(gen.id),
                                      tags={GENERATION_TAG: str(gen.id)}))
        elif gen.state == "passed":  # its publication gave up (the index stayed busy): again
            runs.append(dg.RunRequest(
                job_name=GATE_JOB.name, partition_key=str(gen.id),
                asset_selection=[published_generation.key], tags={GENERATION_TAG: str(gen.id)}))
        else:  # its evaluation run ended without a verdict
            set_state(conn, gen.id, "failed",
                      f"the {GATE_JOB.name} run of generation {gen.id} ended without a verdict; "
                      "see that run in Dagster")
    return runs, partitions
