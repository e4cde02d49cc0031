"""The files ingestion could not take: those still failing (their last good version, if any,
is still served) and those a run failed on. A file skipped for want of text (a blank scan) is
no failure: `kb ingest` says so instead."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import msgspec
import psycopg

from kb_core.database import connect
from kb_core.queries import query

__all__ = ["IngestionFailure", "failures_of_runs", "open_failures"]


class IngestionFailure(msgspec.Struct):
    """Why a file could not be ingested, the last time it failed."""

    path: str  # as people see it: relative to its watched folder, prefixed with its name
    stage: str  # the asset that failed on it
    error: str
    failed_at: dt.datetime


def open_failures(conn: psycopg.Connection) -> list[IngestionFailure]:
    """The files that could not be ingested and have not been since, each by its last
    failure."""
    return [IngestionFailure(*row) for row in conn.execute(query("open_failures"))]


def failures_of_runs(database_url: str, run_ids: Sequence[str]) -> dict[str, str]:
    """The files the runs `run_ids` failed on and that have not been ingested since: the
    error of each, by source_uri."""
    with connect(database_url, autocommit=True) as conn:
        return dict(conn.execute(query("failures_of_runs"), {"run_ids": list(run_ids)}))
