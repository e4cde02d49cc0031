"""Run bookkeeping shared by the folder sensor and the in-process drivers (`kb ingest`,
`kb generation rebuild`): the documents partitions kept in step with the catalogue, changed
documents turned into a few runs over ranges of partitions, the tags that say which generation
and which process a run belongs to (and whether a generation's runs are still going), and the
clean-up after runs whose process died."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import dagster as dg
import psycopg
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from kb_core.queries import query

__all__ = [
    "DOCUMENTS_PARTITIONS",
    "GENERATIONS_PARTITIONS",
    "GENERATION_TAG",
    "MAX_CHANGED_PER_RUN",
    "MAX_REBUILT_PER_RUN",
    "UNFINISHED",
    "PartitionChanges",
    "apply_partition_changes",
    "fail_abandoned_runs",
    "generation_running",
    "keys_in_runs",
    "partition_changes",
    "partition_ranges",
    "process_tags",
    "range_tags",
    "rebuild_tags",
    "run_generation",
    "sweep_staging",
]

log = logging.getLogger(__name__)

# One partition per document, keyed by its source_uri.
DOCUMENTS_PARTITIONS = dg.DynamicPartitionsDefinition(name="documents")
# One partition per rebuilt index generation, keyed by its id, for its evaluation and publication.
GENERATIONS_PARTITIONS = dg.DynamicPartitionsDefinition(name="generations")

# On the runs of a rebuild: the index generation they build (absent: the live one).
GENERATION_TAG = "kb/generation"

# Enough to amortise a run's start-up; few enough that a crashed run redoes little.
MAX_CHANGED_PER_RUN = 200
# A rebuild's runs take more: each also counts the passages of every set of groups in the
# generation (the keyword statistics check; ~3 s at 1M passages), and nobody waits for one of
# its documents.
MAX_REBUILT_PER_RUN = 1000

# The process that executes a run in-process, so a later `kb ingest` or sensor tick can tell a
# run whose process was killed from one still working: Dagster's default run launcher cannot
# check a run's worker, so a killed run stayed STARTED for ever, and the sensor, which leaves
# the files of active runs alone, never ingested its files again.
HOST_TAG = "kb/ingest_host"
PID_TAG = "kb/ingest_pid"

# A run in any of these states may still write: its files are not idle.
UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def partition_ranges(
    ordered_keys: Sequence[str], changed: Iterable[str], max_changed: int = MAX_CHANGED_PER_RUN
) -> list[tuple[str, str]]:
    """Ranges (first, last) of `ordered_keys` covering every changed key, each with at most
    `max_changed` changed keys. Unchanged keys inside a range are skipped cheaply by
    raw_documents, which costs far less than another run."""
    position = {key: i for i, key in enumerate(ordered_keys)}
    indexes = sorted(position[k] for k in set(changed))
    return [
        (ordered_keys[group[0]], ordered_keys[group[-1]])
        for group in (indexes[i : i + max_changed] for i in range(0, len(indexes), max_changed))
    ]


def range_tags(first: str, last: str) -> dict[str, str]:
    return {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}


def rebuild_tags(gen_id: int, first: str, last: str) -> dict[str, str]:
    return {**range_tags(first, last), GENERATION_TAG: str(gen_id)}


def run_generation(tags: Mapping[str, str]) -> int | None:
    """The index generation a run writes to, from its tags (None: the live generation)."""
    value = tags.get(GENERATION_TAG)
    return None if value is None else int(value)


def keys_in_runs(
    instance: dg.DagsterInstance, job_name: str, ordered_keys: Sequence[str]
) -> set[str]:
    """Partition keys that queued or running runs of `job_name` already cover in the live
    generation (a rebuild's runs write elsewhere)."""
    position = {key: i for i, key in enumerate(ordered_keys)}
    covered: set[str] = set()
    for run in instance.get_runs(dg.RunsFilter(job_name=job_name, statuses=UNFINISHED)):
        if run_generation(run.tags) is not None:
            continue
        first = run.tags.get(ASSET_PARTITION_RANGE_START_TAG, run.tags.get("dagster/partition"))
        last = run.tags.get(ASSET_PARTITION_RANGE_END_TAG, first)
        if first in position and last in position:
            covered.update(ordered_keys[position[first] : position[last] + 1])
    return covered


def generation_running(instance: dg.DagsterInstance, gen_id: int) -> bool:
    """Whether a rebuild or evaluation run of generation `gen_id` is queued or running."""
    return bool(instance.get_run_ids(
        dg.RunsFilter(tags={GENERATION_TAG: str(gen_id)}, statuses=UNFINISHED), limit=1))


@dataclass(frozen=True)
class PartitionChanges:
    """How the documents partitions follow the catalogue after one look at the folders."""

    added: list[str]  # files seen for the first time
    deleted: list[str]  # partitions whose file the catalogue no longer holds
    ordered: list[str]  # every partition key after the changes, in Dagster's order


def partition_changes(
    conn: psycopg.Connection, instance: dg.DagsterInstance, seen: Iterable[str]
) -> PartitionChanges:
    """The partitions to add for new files and to delete for files the catalogue forgot.

    Not only this look's deleted files: a process killed between forgetting files and deleting
    their partitions left partitions behind, and a run over a range holding one recorded the
    deleted file as failing. The sensor returns these changes as requests; an in-process driver
    applies them with `apply_partition_changes`."""
    existing = instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS.name)
    known = set(existing)
    added = [k for k in dict.fromkeys(seen) if k not in known]
    deleted = [k for (k,) in conn.execute(query("unregistered_keys"), {"keys": existing})]
    gone = set(deleted)
    return PartitionChanges(added, deleted, [k for k in existing if k not in gone] + added)


def apply_partition_changes(instance: dg.DagsterInstance, changes: PartitionChanges) -> None:
    if changes.added:
        instance.add_dynamic_partitions(DOCUMENTS_PARTITIONS.name, changes.added)
    for key in changes.deleted:
        instance.delete_dynamic_partition(DOCUMENTS_PARTITIONS.name, key)


def process_tags() -> dict[str, str]:
    """The tags of a run this process executes in-process, for `fail_abandoned_runs`."""
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}


def fail_abandoned_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark as failed the unfinished in-process runs (`kb ingest`, `kb generation rebuild`)
    whose process on this host died; return their run ids."""
    host = socket.gethostname()
    abandoned = []
    # Every job run in-process carries the tags (`process_tags`).
    runs = instance.get_runs(dg.RunsFilter(statuses=UNFINISHED, tags={HOST_TAG: host}))
    for run in runs:
        pid = int(run.tags.get(PID_TAG, "0"))
        if pid and not _process_alive(pid):
            instance.report_run_failed(run, f"the process that ran it (pid {pid}) died")
            # Its step may hold a slot of the `embedding` pool that no one else would free.
            if instance.event_log_storage.supports_global_concurrency_limits:
                instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
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
