"""The asset checks on search_index pass on a sound index and fail on each kind of damage."""

from __future__ import annotations

import dagster as dg
import pytest

from kb_core.queries import query
from kb_pipeline.defs.ingestion import checks
from kb_pipeline.defs.resources import PostgresResource
from kb_pipeline.in_process import ingest_paths


@pytest.fixture
def indexed(settings, instance, tmp_path, conn):
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "_access.toml").write_text('groups = ["all-employees"]\n')
    for name in ("a", "b"):
        sections = "\n".join(f"## 第{i}条（見出し{i}）\n\n{name}の条文{i}。\n" for i in range(1, 8))
        title = {"a": "安全規程", "b": "衛生規程"}[name]
        (folder / f"{name}.md").write_text(f"# {title}\n\n{sections}\n", encoding="utf-8")
    summary = ingest_paths([folder], None, settings, instance)
    assert summary.ingested == 2
    assert conn.execute("SELECT min(n) FROM (SELECT count(*) n FROM chunks GROUP BY "
                        "document_id) t").fetchone()[0] >= 3
    return PostgresResource(url=settings.database_url)


def run_check(check: dg.AssetChecksDefinition, postgres: PostgresResource) -> dg.AssetCheckResult:
    return check(dg.build_asset_check_context(), postgres=postgres)


def test_checks_pass_on_a_sound_index(indexed):
    for check in checks.INDEX_CHECKS:
        assert run_check(check, indexed).passed, check.name


@pytest.mark.parametrize(
    "damage",
    [
        "DELETE FROM chunks WHERE chunk_index = 1",
        "UPDATE chunks SET chunk_index = chunk_index + 10 WHERE chunk_index = 2",
        "UPDATE chunks SET allowed_groups = '{everyone}' WHERE chunk_index = 0",
        "DELETE FROM chunks WHERE document_id = (SELECT min(id) FROM documents)",
    ],
    ids=["gap", "displaced", "groups-differ", "no-chunks"],
)
def test_whole_chunk_set_check_fails_on_a_damaged_document(indexed, conn, damage):
    conn.execute(damage)
    result = run_check(checks.documents_have_whole_chunk_sets, indexed)
    assert not result.passed
    assert result.severity == dg.AssetCheckSeverity.ERROR


def test_embedding_check_fails_on_a_vector_that_is_not_unit_length(indexed, conn):
    conn.execute("UPDATE chunk_vectors SET embedding = array_fill(0.5, ARRAY[384])::vector "
                 "WHERE chunk_id = (SELECT min(id) FROM chunks)")
    assert not run_check(checks.chunks_have_valid_embeddings, indexed).passed


def test_embedding_check_fails_on_a_chunk_without_vectors(indexed, conn):
    conn.execute("DELETE FROM chunk_vectors WHERE chunk_id = (SELECT min(id) FROM chunks)")
    assert not run_check(checks.chunks_have_valid_embeddings, indexed).passed


def test_embedding_check_fails_on_a_vector_readable_by_other_groups_than_its_chunk(indexed, conn):
    conn.execute("UPDATE chunk_vectors SET allowed_groups = '{someone-else}' "
                 "WHERE chunk_id = (SELECT min(id) FROM chunks)")
    assert not run_check(checks.chunks_have_valid_embeddings, indexed).passed


def test_orphan_check_fails_on_a_document_whose_file_left_the_catalogue(indexed, conn):
    conn.execute("DELETE FROM document_sources WHERE source_uri LIKE '%%/a.md'")
    assert not run_check(checks.no_orphan_documents, indexed).passed


def test_access_rule_check_warns_about_documents_visible_to_nobody(indexed, conn):
    conn.execute("UPDATE documents SET access_rule = NULL WHERE source_uri LIKE '%%/a.md'")
    result = run_check(checks.documents_have_access_rules, indexed)
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    assert "kb/a.md" in result.metadata["paths"].value


def test_keyword_statistics_follow_re_permission_and_deletion(indexed, conn):
    def passages() -> dict[tuple[str, ...], int]:
        return {tuple(groups): n for groups, n in conn.execute(
            "SELECT s.groups, d.df FROM keyword_df d JOIN group_sets s ON s.id = d.set_id "
            "WHERE d.term = '' AND d.df > 0")}

    def drift() -> int:
        return conn.execute(query("keyword_df_drift")).fetchone()[0]

    per_document = dict(conn.execute(
        "SELECT d.source_uri, count(*) FROM documents d JOIN chunks c ON c.document_id = d.id "
        "GROUP BY d.source_uri"))
    a, b = sorted(per_document)
    assert passages() == {("all-employees",): per_document[a] + per_document[b]}
    assert drift() == 0
    # Given unsorted and twice, the groups are one canonical set.
    conn.execute(query("regroup_document"),
                 {"uri": a, "groups": ["managers", "hr", "managers"], "rule": "t"})
    assert passages() == {("all-employees",): per_document[b], ("hr", "managers"): per_document[a]}
    assert drift() == 0
    conn.execute("DELETE FROM documents WHERE source_uri = %s", (b,))
    assert passages() == {("hr", "managers"): per_document[a]}
    assert drift() == 0
    assert run_check(checks.keyword_statistics_match_chunks, indexed).passed


def test_keyword_statistics_check_fails_on_a_count_that_drifted(indexed, conn):
    conn.execute("UPDATE keyword_df SET df = df + 1 WHERE term = ''")
    assert not run_check(checks.keyword_statistics_match_chunks, indexed).passed


def test_keyword_statistics_check_fails_on_a_group_count_that_drifted(indexed, conn):
    conn.execute("UPDATE keyword_df_by_group SET df = df + 1 WHERE term = ''")
    assert not run_check(checks.keyword_statistics_match_chunks, indexed).passed


def test_the_graph_check_counts_the_graph_and_fails_on_a_reference_its_passage_does_not_make(
        indexed, conn):
    result = run_check(checks.entity_graph_is_whole, indexed)
    assert result.passed
    # Each passage names its 規程 (its title) and its 第N条: 安全規程, 安全規程第1条, ...
    passages = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert result.metadata["mentions"].value >= 2 * passages
    assert result.metadata["entities"].value == 2 + 2 * 7
    conn.execute("INSERT INTO relations (source_key, target_key, kind, chunk_id) "
                 "SELECT '安全規程', 'qc-9999', 'reference', min(id) FROM chunks")
    broken = run_check(checks.entity_graph_is_whole, indexed)
    assert not broken.passed and "qc-9999" in broken.metadata["examples"].value


def test_integrity_checks_are_blocking_errors():
    blocking = {spec.name for c in checks.INDEX_CHECKS for spec in c.check_specs if spec.blocking}
    assert blocking == {
        "chunks_have_valid_embeddings", "documents_have_whole_chunk_sets",
        "entity_graph_is_whole", "keyword_statistics_match_chunks", "no_orphan_documents",
        "tables_are_whole",
    }


def test_a_run_over_a_broken_index_fails_its_blocking_check(settings, instance, indexed, conn,
                                                           tmp_path):
    conn.execute("UPDATE chunks SET allowed_groups = '{everyone}' WHERE chunk_index = 0")
    (tmp_path / "kb" / "c.md").write_text("# C\n\n本文。\n", encoding="utf-8")
    ingest_paths([tmp_path / "kb"], None, settings, instance)
    run = instance.get_run_records(limit=1)[0].dagster_run
    assert run.status == dg.DagsterRunStatus.FAILURE
    evaluations = [
        e.asset_check_evaluation for e in instance.all_logs(run.run_id)
        if e.dagster_event and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"
    ]
    failed = {e.check_name for e in evaluations if not e.passed}
    assert "documents_have_whole_chunk_sets" in failed
