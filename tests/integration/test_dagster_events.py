"""Dagster's instance on our PostgreSQL storage (kb_pipeline/dagster_storage.py), as `kb up`,
`kb ingest` and `kb generation rebuild` open it: a run over many document partitions records
each partition's planned and recorded materializations, and writes them in a few statements,
not one connection and two transactions per event; the partition keys it keeps follow changes
made by any process; a rebuild's runs are executed by worker processes, two at a time, whose
progress and log records reach the process that asked for the rebuild; the `embedding` pool's
limit follows KB_EMBED_STEPS, however many runs start its steps at once."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import psycopg
import pytest

from kb_core.database_server import dagster_storage_url
from kb_core.progress import listening
from kb_core.settings import EvalSettings, Settings
from kb_pipeline import in_process
from kb_pipeline.dagster_home import dagster_instance
from kb_pipeline.defs.ingestion.assets import EMBEDDING_POOL
from kb_pipeline.defs.ingestion.jobs import INGEST_JOB
from kb_pipeline.defs.run_logging import EVENTS_LOGGER
from kb_pipeline.in_process import ingest_paths, rebuild_in_process
from kb_pipeline.runs import GENERATION_TAG, PID_TAG, partition_ranges

ASSETS = ("raw_documents", "parsed_documents", "chunks", "chunk_embeddings", "entity_graph",
          "search_index")


@pytest.fixture
def pg_settings(settings: Settings, admin_url: str, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """Settings whose Dagster instance lives in a database of its own on the test server."""
    # The storage sets the variable in this process; recorded as unset, so it is unset again.
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "")
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE")
    name = f"d_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield dataclasses.replace(settings, home=tmp_path / "home",
                              dagster_database_url=admin_url.replace("/postgres?", f"/{name}?"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def rules(folder: Path, count: int) -> set[str]:
    """`count` short rules in `folder`, for every employee; their partition keys."""
    folder.mkdir()
    (folder / "_access.toml").write_text('groups = ["all-employees"]\n')
    for n in range(count):
        (folder / f"rule{n:02d}.md").write_text(
            f"# 規程{n}\n\n第1条（目的）\nこの規程は手続{n}を定める。\n", encoding="utf-8")
    return {str(path) for path in folder.glob("*.md")}


def test_a_runs_materializations_are_all_recorded_in_batched_writes(pg_settings, tmp_path):
    folder = tmp_path / "kb"
    keys = rules(folder, 12)

    with dagster_instance(pg_settings) as instance:
        summary = ingest_paths([folder], None, pg_settings, instance)
        assert (summary.ingested, summary.failed) == (12, [])
        (run,) = instance.get_run_records()
        for asset in ASSETS:
            assert instance.get_materialized_partitions(dg.AssetKey(asset)) == keys
            assert instance.get_latest_materialization_event(
                dg.AssetKey(asset)).run_id == run.dagster_run.run_id

    url = dagster_storage_url(pg_settings).replace("postgresql+psycopg2://", "postgresql://")
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT dagster_event_type, asset_key, partition, xmin::text FROM event_logs "
            "WHERE dagster_event_type IN ('ASSET_MATERIALIZATION_PLANNED', "
            "'ASSET_MATERIALIZATION')").fetchall()
    for kind in ("ASSET_MATERIALIZATION_PLANNED", "ASSET_MATERIALIZATION"):
        events = [row for row in rows if row[0] == kind]
        assert sorted((asset, partition) for _, asset, partition, _ in events) == sorted(
            (f'["{asset}"]', key) for asset in ASSETS for key in keys)
        # Rows inserted by one statement share its transaction: the run's plan is one write,
        # each step's materializations one more.
        writes = {transaction for *_, transaction in events}
        assert len(writes) == (1 if kind == "ASSET_MATERIALIZATION_PLANNED" else len(ASSETS))


def test_partition_keys_read_by_one_instance_follow_changes_made_through_another(pg_settings):
    with dagster_instance(pg_settings) as reader, dagster_instance(pg_settings) as writer:
        writer.add_dynamic_partitions("documents", ["/kb/a.md", "/kb/b.md"])
        assert reader.get_dynamic_partitions("documents") == ["/kb/a.md", "/kb/b.md"]
        assert reader.get_dynamic_partitions("documents") == ["/kb/a.md", "/kb/b.md"]
        writer.add_dynamic_partitions("documents", ["/kb/c.md"])
        assert reader.get_dynamic_partitions("documents") == ["/kb/a.md", "/kb/b.md", "/kb/c.md"]
        # One key out and one in: as many keys as before, so only the greatest id tells.
        writer.delete_dynamic_partition("documents", "/kb/a.md")
        writer.add_dynamic_partitions("documents", ["/kb/d.md"])
        assert reader.get_dynamic_partitions("documents") == ["/kb/b.md", "/kb/c.md", "/kb/d.md"]
        # An older key out: the greatest id stays, the count tells.
        writer.delete_dynamic_partition("documents", "/kb/b.md")
        assert reader.get_dynamic_partitions("documents") == ["/kb/c.md", "/kb/d.md"]
        assert reader.get_dynamic_partitions("generations") == []


def test_the_runs_of_an_ingest_and_a_rebuild_are_executed_by_two_workers_that_report_here(
        pg_settings, tmp_path, monkeypatch, caplog):
    # The stand-in embedder's recall says nothing: no floor for the rebuild's gate.
    pg_settings = dataclasses.replace(pg_settings, evaluation=EvalSettings(min_recall_at_5=0))
    # Runs of four documents, for an ingest (200) and a rebuild (1,000) alike.
    monkeypatch.setattr(in_process, "partition_ranges",
                        lambda keys, changed, _most=None: partition_ranges(keys, changed, 4))
    folder = tmp_path / "kb"
    keys = rules(folder, 12)
    reports: list[tuple[str, str | None]] = []
    with (dagster_instance(pg_settings) as instance,
          listening(lambda event, uri, _count: reports.append((event, uri))),
          caplog.at_level(logging.DEBUG, logger=EVENTS_LOGGER)):
        summary = ingest_paths([folder], None, pg_settings, instance)
        ingested = [r.dagster_run for r in instance.get_run_records(
            dg.RunsFilter(job_name=INGEST_JOB.name))]
        gen = rebuild_in_process(pg_settings, instance)
        rebuilt = [r.dagster_run for r in instance.get_run_records(
            dg.RunsFilter(job_name=INGEST_JOB.name, tags={GENERATION_TAG: str(gen.id)}))]

    assert (summary.ingested, summary.failed) == (12, [])
    assert gen.state == "live", gen.note
    relayed = {str(record.process) for record in caplog.records
               if record.name == EVENTS_LOGGER}
    for runs in (ingested, rebuilt):
        assert len(runs) == 3 and all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
        # Each run names the worker that executed it, for fail_abandoned_runs; the instance's
        # limit (two, as `kb up` writes it) gives two workers, whose log records came here.
        workers = {run.tags[PID_TAG] for run in runs}
        assert len(workers) == 2 and str(os.getpid()) not in workers
        assert relayed >= workers
    indexed = [uri for event, uri in reports if event == "indexed"]
    assert sorted(indexed) == sorted([*keys, *keys])  # each document once by each


def pool(settings: Settings) -> tuple[int, bool, int]:
    """The `embedding` pool's limit, whether it is the default, and its slots."""
    url = dagster_storage_url(settings).replace("postgresql+psycopg2://", "postgresql://")
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT l.\"limit\", l.using_default_limit, (SELECT count(*) FROM concurrency_slots "
            "WHERE concurrency_key = l.concurrency_key AND NOT deleted) "
            "FROM concurrency_limits l WHERE concurrency_key = %s", [EMBEDDING_POOL]).fetchone()


def test_a_pools_limit_is_set_by_the_second_of_two_runs_that_start_its_steps_at_once(
        pg_settings):
    url = dagster_storage_url(pg_settings).replace("postgresql+psycopg2://", "postgresql://")
    with dagster_instance(pg_settings) as instance:
        failures: list[BaseException] = []

        def second() -> None:
            try:
                instance.event_log_storage.initialize_concurrency_limit_to_default(
                    EMBEDDING_POOL)
            except BaseException as error:  # noqa: BLE001 - told by the assertion below
                failures.append(error)

        # The first run's worker has inserted the pool's limit, not yet committed.
        with psycopg.connect(url) as first:
            first.execute("INSERT INTO concurrency_limits (concurrency_key, \"limit\", "
                          "using_default_limit) VALUES (%s, 2, true)", [EMBEDDING_POOL])
            thread = threading.Thread(target=second)
            thread.start()
            with psycopg.connect(url, autocommit=True) as watch:
                for _ in range(200):
                    if watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                     "current_database() AND wait_event_type = 'Lock'"
                                     ).fetchone()[0]:
                        break
                    time.sleep(0.05)
                else:
                    pytest.fail("the second run never waited for the first's row")
        thread.join(30)

    assert failures == []
    assert pool(pg_settings) == (2, True, 2)


def test_a_pools_limit_follows_kb_embed_steps_unless_set_by_hand(pg_settings):
    with dagster_instance(pg_settings) as instance:
        instance.event_log_storage.initialize_concurrency_limit_to_default(EMBEDDING_POOL)
    assert pool(pg_settings) == (2, True, 2)

    three = dataclasses.replace(pg_settings, embedding_steps=3)
    with dagster_instance(three) as instance:
        instance.event_log_storage.initialize_concurrency_limit_to_default(EMBEDDING_POOL)
        assert pool(three) == (3, True, 3)
        instance.event_log_storage.set_concurrency_slots(EMBEDDING_POOL, 1)

    with dagster_instance(pg_settings) as instance:
        instance.event_log_storage.initialize_concurrency_limit_to_default(EMBEDDING_POOL)
    assert pool(pg_settings) == (1, False, 1)
