"""The folder sensor, evaluated with a real Dagster instance; its runs executed in process as
the daemon would launch them."""

from __future__ import annotations

import dagster as dg
import psycopg
import pytest

from kb_core.settings import Settings
from kb_pipeline.definitions import make_definitions
from kb_pipeline.defs.resources import resources_for
from kb_pipeline.defs.watched_folders.sensors import docs_folder_sensor
from kb_pipeline.runs import MAX_CHANGED_PER_RUN


def evaluate(settings: Settings, instance: dg.DagsterInstance) -> dg.SensorResult:
    """One evaluation of the folder sensor with the resources of `settings`, its partition
    requests applied; no run executed."""
    # A context manager: the resources holding the providers' resource are set up in it.
    with dg.build_sensor_context(instance=instance, resources=resources_for(settings)) as context:
        result = docs_folder_sensor(context)
    for request in result.dynamic_partitions_requests or []:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    return result


def tick(settings: Settings, instance: dg.DagsterInstance) -> dg.SensorResult:
    """Evaluate the sensor once, apply its partition requests, and execute its runs."""
    result = evaluate(settings, instance)
    for run in result.run_requests or []:
        outcome = make_definitions(settings).resolve_job_def(run.job_name).execute_in_process(
            instance=instance, tags=run.tags, run_config=run.run_config,
            partition_key=run.partition_key,
        )
        assert outcome.success
    return result


def documents(conn: psycopg.Connection) -> dict[str, list[str]]:
    return dict(conn.execute("SELECT path, allowed_groups FROM documents"))


def test_new_files_are_ingested_in_one_run(settings, instance, docs_dir, conn):
    result = tick(settings, instance)
    assert len(result.run_requests) == 1
    assert len(documents(conn)) == len(instance.get_dynamic_partitions("documents")) >= 12


def test_unchanged_files_launch_no_run(settings, instance, conn):
    tick(settings, instance)
    result = tick(settings, instance)
    assert not result.run_requests and not result.dynamic_partitions_requests
    assert " 0 to ingest in 0 runs" in result.skip_reason.skip_message


def test_touched_but_identical_file_launches_no_run(settings, instance, docs_dir):
    tick(settings, instance)
    some = next(docs_dir.rglob("*.md"))
    some.write_bytes(some.read_bytes())  # new mtime, same bytes
    assert not tick(settings, instance).run_requests


def test_many_changed_files_are_batched_into_few_runs(settings, instance, tmp_path, conn):
    folder = tmp_path / "many"
    folder.mkdir()
    (folder / "_access.toml").write_text('groups = ["all-employees"]\n')
    # One more than a run takes (MAX_CHANGED_PER_RUN; the split itself: tests/unit/test_runs.py).
    for i in range(MAX_CHANGED_PER_RUN + 1):
        (folder / f"doc{i:04}.md").write_text(f"# 文書{i}\n\n第1条 本文{i}。\n", encoding="utf-8")
    settings = Settings(**{**settings.__dict__, "docs_dirs": (folder,)})
    result = tick(settings, instance)
    assert len(result.run_requests) == 2  # 200 + 1
    assert len(documents(conn)) == MAX_CHANGED_PER_RUN + 1
    # Edits scattered over the folder still make one run; the unchanged files between them
    # are skipped by raw_documents without parsing.
    for i in (3, 100, MAX_CHANGED_PER_RUN):
        (folder / f"doc{i:04}.md").write_text(f"# 文書{i}\n\n第1条 改定{i}。\n", encoding="utf-8")
    assert len(tick(settings, instance).run_requests) == 1
    assert conn.execute(
        "SELECT count(*) FROM chunks WHERE content LIKE '%%改定%%'"
    ).fetchone()[0] == 3


def test_deleted_file_leaves_the_index_and_its_partition(settings, instance, docs_dir, conn):
    tick(settings, instance)
    victim = next(docs_dir.rglob("*.txt"))
    victim.unlink()
    result = tick(settings, instance)
    assert not result.run_requests
    assert str(victim) not in instance.get_dynamic_partitions("documents")
    assert not conn.execute(
        "SELECT 1 FROM documents WHERE source_uri = %s", (str(victim),)
    ).fetchall()


@pytest.mark.parametrize("how", ["missing", "emptied"])
def test_missing_or_emptied_folder_deletes_nothing(settings, instance, docs_dir, conn, how):
    tick(settings, instance)
    indexed = documents(conn)
    if how == "missing":
        docs_dir.rename(docs_dir.with_name("unmounted"))
    else:
        for file in [p for p in docs_dir.rglob("*") if p.is_file()]:
            file.unlink()
    result = tick(settings, instance)
    assert documents(conn) == indexed
    assert not result.dynamic_partitions_requests
    assert len(instance.get_dynamic_partitions("documents")) == len(indexed)


def test_access_file_edit_repermissions_without_reembedding(settings, instance, docs_dir, conn):
    tick(settings, instance)
    embedded = conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
    ingested_at = dict(conn.execute("SELECT path, ingested_at FROM documents"))
    access = docs_dir / "hr" / "_access.toml"
    access.write_text('groups = ["hr"]\n', encoding="utf-8")

    result = tick(settings, instance)

    assert not result.run_requests
    hr_docs = {p: g for p, g in documents(conn).items() if p.startswith("docs/hr/")}
    assert hr_docs and all(g == ["hr"] for p, g in hr_docs.items() if "給与" not in p)
    assert not conn.execute(
        "SELECT 1 FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.allowed_groups <> d.allowed_groups"
    ).fetchall()
    assert conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0] == embedded
    assert dict(conn.execute("SELECT path, ingested_at FROM documents")) == ingested_at


def test_access_rule_with_per_file_override(settings, instance, tmp_path, conn):
    folder = tmp_path / "acl"
    (folder / "sub").mkdir(parents=True)
    (folder / "_access.toml").write_text(
        'groups = ["all"]\n[files]\n"secret.md" = ["hr", "managers"]\n', encoding="utf-8"
    )
    for name in ("open.md", "secret.md", "sub/inherited.md"):
        (folder / name).write_text(f"# {name}\n\n本文。\n", encoding="utf-8")
    tick(Settings(**{**settings.__dict__, "docs_dirs": (folder,)}), instance)
    assert documents(conn) == {
        "acl/open.md": ["all"],
        "acl/secret.md": ["hr", "managers"],
        "acl/sub/inherited.md": ["all"],
    }
