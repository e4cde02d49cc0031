"""Turning a set of changed documents into a few runs over ranges of partitions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import dagster as dg
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

__all__ = [
    "GENERATION_TAG",
    "MAX_CHANGED_PER_RUN",
    "UNFINISHED",
    "keys_in_runs",
    "partition_ranges",
    "range_tags",
    "run_generation",
]

# On the runs of a rebuild: the index generation they build (absent: the live one).
GENERATION_TAG = "kb/generation"

# Enough to amortise a run's start-up; few enough that a crashed run redoes little.
MAX_CHANGED_PER_RUN = 200

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
