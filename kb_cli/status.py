"""`kb status`: what state this installation is in, on one screen. It starts nothing: a stopped
embedded database is reported as stopped, with what it would take to start it."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import urllib.parse

import dagster as dg
import httpx
import msgspec
import psycopg
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.storage.tags import SENSOR_NAME_TAG
from rich.console import Console
from rich.table import Table

from kb_cli.addresses import read_addresses
from kb_cli.output import emit
from kb_core.database_server import embedded_status
from kb_core.settings import Settings
from kb_pipeline.dagster_home import dagster_instance
from kb_search import IndexCounts, IndexGeneration, open_knowledge_base

__all__ = ["Status", "run"]

SENSOR = "docs_folder_sensor"
EVALUATION_ASSET = "retrieval_evaluation"
# The evaluation's figures the screen shows (the JSON has them all).
_ON_SCREEN = ("hybrid R@5", "hybrid MRR@10", "answers cited_expected_rate",
              "answers not_found_precision", "answers not_found_recall",
              "answers answerable_not_found_rate")


class Database(msgspec.Struct):
    embedded: bool
    url: str  # without its password
    running: bool
    size_bytes: int | None = None


class Run(msgspec.Struct):
    run_id: str
    job: str
    status: str
    at: str | None  # when it finished, or started while it runs


class Sensor(msgspec.Struct):
    last_tick: str | None
    last_run: Run | None


class Service(msgspec.Struct):
    running: bool
    url: str | None
    dagster_url: str | None


class Evaluation(msgspec.Struct):
    at: str
    figures: dict[str, float]


class Status(msgspec.Struct):
    """The JSON `kb status --json` prints."""

    home: str
    database: Database
    generation: IndexGeneration | None
    rebuild: IndexGeneration | None
    index: IndexCounts | None
    sensor: Sensor | None
    service: Service
    evaluation: Evaluation | None


def run(args: argparse.Namespace, settings: Settings) -> int:
    database, url = _database(settings)
    status = Status(home=str(settings.home), database=database, generation=None, rebuild=None,
                    index=None, sensor=None, service=_service(settings), evaluation=None)
    if url is not None:
        settings = dataclasses.replace(settings, database_url=url)
        with open_knowledge_base(settings, connections=1, answers=False) as kb:
            index = kb.operations.status()
        status.generation, status.rebuild, status.index = (index.generation, index.rebuild,
                                                           index.index)
        database.size_bytes = index.size_bytes
        with dagster_instance(settings) as instance:
            status.sensor = _sensor(instance)
            status.evaluation = _evaluation(instance)
    emit(args, status, lambda: Console().print(_table(status)))
    return 0


def _database(settings: Settings) -> tuple[Database, str | None]:
    """The database and, when it answers, its URL."""
    if settings.database_url is None:
        embedded = embedded_status(settings)
        url = embedded["url"]
        database = Database(embedded=True, url=_redacted(url or embedded["pgdata"]),
                            running=bool(embedded["running"]))
    else:
        url = settings.database_url
        database = Database(embedded=False, url=_redacted(url), running=_answers(url))
    return database, url if database.running else None


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=3):
            return True
    except psycopg.OperationalError:
        return False


def _redacted(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _sensor(instance: dg.DagsterInstance) -> Sensor:
    ticks = [state.instigator_data.last_tick_timestamp
             for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
             if state.instigator_name == SENSOR and state.instigator_data is not None
             and state.instigator_data.last_tick_timestamp]
    runs = instance.get_runs(dg.RunsFilter(tags={SENSOR_NAME_TAG: SENSOR}), limit=1)
    last_run = None
    if runs:
        stats = instance.get_run_stats(runs[0].run_id)
        last_run = Run(run_id=runs[0].run_id, job=runs[0].job_name,
                       status=runs[0].status.value.lower(),
                       at=_iso(stats.end_time or stats.start_time))
    return Sensor(last_tick=_iso(max(ticks)) if ticks else None, last_run=last_run)


def _evaluation(instance: dg.DagsterInstance) -> Evaluation | None:
    event = instance.get_latest_materialization_event(dg.AssetKey(EVALUATION_ASSET))
    if event is None or event.asset_materialization is None:
        return None
    figures = {name: value.value for name, value in event.asset_materialization.metadata.items()
               if isinstance(value.value, float) and name != "elapsed_s"}
    return Evaluation(at=_iso(event.timestamp), figures=figures)


def _service(settings: Settings) -> Service:
    addresses = read_addresses(settings.home) or {}
    url = addresses.get("service")
    try:
        running = url is not None and httpx.get(f"{url}/healthz", timeout=2).is_success
    except httpx.HTTPError:
        running = False
    return Service(running=running, url=url if running else None,
                   dagster_url=addresses.get("dagster") if running else None)


def _iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat(timespec="seconds")


def _table(status: Status) -> Table:
    """The human screen: one row per part."""
    table = Table(title=f"kb status: {status.home}", title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    db = status.database
    table.add_row("database", f"{'embedded' if db.embedded else 'external'} {db.url}: "
                  + (f"running, {db.size_bytes / 2**20:.0f} MB" if db.running
                     else "stopped (kb db start, or any command that needs it, starts it)"))
    gen = status.generation
    table.add_row("index", f"generation {gen.id}, model {gen.model or '(none yet)'}"
                  if gen else "-")
    if status.rebuild:
        table.add_row("rebuild", f"generation {status.rebuild.id}: {status.rebuild.state}")
    if status.index:
        ix = status.index
        table.add_row("documents", f"{ix.documents} ({ix.chunks} chunks), {ix.failures} failed"
                      + (" (kb failures)" if ix.failures else "")
                      + (f", {ix.waiting_for_ocr} scans waiting for OCR"
                         if ix.waiting_for_ocr else ""))
        groups = ", ".join(f"{g} {n}" for g, n in ix.groups.items()) or "-"
        table.add_row("groups", groups + (f"; visible to nobody: {ix.visible_to_nobody}"
                                          if ix.visible_to_nobody else ""))
    if status.sensor:
        run = status.sensor.last_run
        table.add_row("sensor", f"last tick {status.sensor.last_tick or 'never'}; last run "
                      + (f"{run.run_id[:8]} {run.job} {run.status} {run.at}" if run else "none"))
    svc = status.service
    table.add_row("service", f"{svc.url} (Dagster UI {svc.dagster_url})" if svc.running
                  else "not running (kb up)")
    ev = status.evaluation
    table.add_row("evaluation", f"{ev.at}: " + ", ".join(
        f"{k} {ev.figures[k]:.3f}" for k in _ON_SCREEN if k in ev.figures) if ev else "none yet")
    return table
