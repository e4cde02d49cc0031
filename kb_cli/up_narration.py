"""What `kb up` tells the person at its terminal while it runs: one line per finished run (the
folder sensor's ingests above all: files, outcome, time) and the errors its servers and daemon
write to their log files. Everything else those processes say stays in the files."""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import IO

import dagster as dg
import psycopg
from dagster._core.storage.tags import SCHEDULE_NAME_TAG, SENSOR_NAME_TAG
from sqlalchemy.exc import SQLAlchemyError

from kb_core.ingestion_failures import failures_of_runs

__all__ = ["RunLines", "ErrorLines"]

log = logging.getLogger("kb.up")

_FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE,
             dg.DagsterRunStatus.CANCELED]
# The level field of the formats the children write: Dagster's ("- ERROR -"), uvicorn's
# ("ERROR:") and ours ("ERROR name:").
_ERROR = re.compile(r"(?:^|\s)(?:ERROR|CRITICAL)[\s:]")
# Dagster colours its level names even in a file.
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


class RunLines:
    """One line per run that finished since `kb up` started."""

    def __init__(self, instance: dg.DagsterInstance, database_url: str) -> None:
        self._instance = instance
        self._database_url = database_url
        self._since = dt.datetime.now(dt.UTC)
        self._told: set[str] = set()
        self._trouble: str | None = None

    def poll(self) -> None:
        try:
            self._tell_finished()
        except (SQLAlchemyError, psycopg.Error) as exc:
            # The database away for a moment must not stop kb up; say so once, not each poll.
            if str(exc) != self._trouble:
                log.warning("cannot read the finished runs: %s", exc)
            self._trouble = str(exc)
        else:
            self._trouble = None

    def _tell_finished(self) -> None:
        runs = self._instance.get_runs(
            dg.RunsFilter(statuses=_FINISHED, updated_after=self._since), limit=50)
        for run in reversed(runs):  # newest first, as Dagster lists them
            if run.run_id in self._told:
                continue
            line = self._line(run)
            self._told.add(run.run_id)
            log.log(logging.INFO if run.status == dg.DagsterRunStatus.SUCCESS
                    else logging.ERROR, "%s", line)

    def _line(self, run: dg.DagsterRun) -> str:
        stats = self._instance.get_run_stats(run.run_id)
        took = (stats.end_time or 0) - (stats.start_time or stats.end_time or 0)
        who = _launcher(run.tags)
        head = f"{who} run {run.run_id[:8]} {run.job_name}: {run.status.value.lower()} " \
               f"in {took:.1f} s"
        if run.job_name == "ingest_documents":
            return f"{head}; {self._ingest_outcome(run.run_id)}"
        if run.job_name == "read_scans":
            return f"{head}; {self._read_outcome(run.run_id)}"
        return head

    def _read_outcome(self, run_id: str) -> str:
        """Pages an OCR run read (and found read before), from scanned_pages' metadata."""
        records = self._instance.get_records_for_run(
            run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=1).records
        read = _metadata(records[0]) if records else {}
        outcome = (f"{read.get('documents', 0)} scans: {read.get('pages_read', 0)} pages read "
                   f"by OCR, {read.get('pages_cached', 0)} from its cache")
        if "mean_confidence" in read:
            outcome += f", mean confidence {read['mean_confidence']}"
        return outcome + (f", {read['errors']} failed (kb failures)" if read.get("errors") else "")

    def _ingest_outcome(self, run_id: str) -> str:
        """Files, indexed, chunks and failures of one ingest run, from its materializations
        (the first is raw_documents', the last search_index's) and the failures table."""
        records = self._instance.get_records_for_run(
            run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=1).records
        last = self._instance.get_records_for_run(
            run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=1,
            ascending=False).records
        raw = _metadata(records[0]) if records else {}
        index = _metadata(last[0]) if last else {}
        failures = list(failures_of_runs(self._database_url, [run_id]).items())
        files = raw.get("documents", 0) + raw.get("skipped", 0) + raw.get("errors", 0)
        outcome = (f"{files} file{'' if files == 1 else 's'}: {index.get('documents', 0)} indexed "
                   f"({index.get('chunks', 0)} chunks), {raw.get('skipped', 0)} unchanged, "
                   f"{len(failures)} failed")
        if failures:
            uri, error = failures[0]
            outcome += f" (first: {Path(uri).name}: {error}; all: kb failures)"
        return outcome


def _launcher(tags: Mapping[str, str]) -> str:
    if SENSOR_NAME_TAG in tags:
        return f"sensor {tags[SENSOR_NAME_TAG]}:"
    if SCHEDULE_NAME_TAG in tags:
        return f"schedule {tags[SCHEDULE_NAME_TAG]}:"
    return "in-process"


def _metadata(record: dg.EventLogRecord) -> dict[str, int]:
    materialization = record.asset_materialization
    if materialization is None:
        return {}
    return {k: v.value for k, v in materialization.metadata.items()
            if isinstance(v.value, int)}


class ErrorLines:
    """The error lines the children append to their log files, as they come: made before they
    start, so that nothing they write is missed."""

    def __init__(self, files: Mapping[str, Path]) -> None:
        self._files: dict[str, IO[str]] = {}
        for name, path in files.items():
            path.touch()
            handle = path.open(encoding="utf-8", errors="replace")
            handle.seek(0, 2)  # what earlier runs wrote is not news
            self._files[name] = handle
        self._partial: dict[str, str] = dict.fromkeys(files, "")

    def poll(self) -> None:
        for name, handle in self._files.items():
            text = self._partial[name] + handle.read()
            *lines, self._partial[name] = text.split("\n")
            for line in (_COLOUR.sub("", line).strip() for line in lines):
                if _ERROR.search(line):
                    log.error("%s: %s", name, line)

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
