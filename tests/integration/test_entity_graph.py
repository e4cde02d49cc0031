"""The knowledge graph through real ingestion (the entity_graph asset, search_index's
transaction) and the graph leg's SQL: what one reference away reaches, and that nothing of a
document outside the caller's groups reaches it, not even as a relation's strength."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kb_core.entities import entities_of, name_candidates
from kb_core.queries import query
from kb_pipeline.in_process import ingest_paths
from kb_search.graph import graph_leg
from kb_search.search import configure_search_session

CORPUS = {
    "all/QC-2031_報告書.md": "# 品質検査報告書 QC-2031\n\nZP-2041のギヤハウジングで寸法不良。"
                             "対象ロットは湖西工場で製造した。関連文書：工程管理表 KP-2041-03。",
    "all/組織図.md": "# 組織図\n\n## 工場と品質責任者\n\n| 拠点 | 品質責任者 |\n|---|---|\n"
                    "| 湖西工場 | 杉本 亮介 |\n| 本社工場 | 北村 由美 |\n",
    "all/取扱説明書.md": "# ZP-2041 取扱説明書\n\nギヤが摩耗したら交換してください。",
    "all/就業規則.md": "# 就業規則\n\n## 第18条（育児休業）\n\n育児休業については、別に定める"
                      "「育児介護休業規程」による。",
    "all/育児介護休業規程.md": "# 育児介護休業規程\n\n## 第6条（介護休業）\n\n"
                             "介護休業は対象家族1人につき通算93日まで取得できる。",
    "all/検査記録.md": "# 本社工場 検査記録\n\n再検査の手順と結果の記録。",
}
# Seen only by hr: it relates QC-2031 to 本社工場, which no other document does.
SECRET = {"hr/極秘メモ.md": "# 極秘メモ\n\nQC-2031の件は本社工場で再検査した。"}
QUESTIONS = ["QC-2031のロットを製造した工場の品質責任者は誰？", "ZP-2041のギヤの交換は？",
             "就業規則の第18条で別に定める規程では介護休業は何日？", "本社工場の品質責任者は？",
             "QC-2031"]
GROUPS = ("all-employees", "hr", "engineering")


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    for folder, group in (("all", "all-employees"), ("hr", "hr")):
        if (root / folder).is_dir():
            (root / folder / "_access.toml").write_text(f'groups = ["{group}"]\n')


@pytest.fixture
def corpus(settings, instance, tmp_path) -> Path:
    root = tmp_path / "corpus"
    _write(root, CORPUS)
    assert ingest_paths([root], None, settings, instance).ingested == len(CORPUS)
    return root


def leg(conn, question: str, groups, exact: bool = False) -> list[tuple[int, float]]:
    """The graph leg as a search runs it, for a caller of `groups`, under the plan for a
    caller of many passages or, `exact`, of few."""
    configure_search_session(conn)
    readable, _, _, things = conn.execute(query("search_scope"), {
        "groups": sorted(groups), "terms": [], "exact_passages": 5000,
        "names": "\x1f".join(name_candidates(question))}).fetchone()
    return graph_leg(conn, entities_of(question), things, sorted(groups), readable, exact,
                     50)


def paths(conn, hits: list[tuple[int, float]]) -> list[str]:
    names = dict(conn.execute("SELECT c.id, d.path FROM chunks c "
                              "JOIN documents d ON d.id = c.document_id").fetchall())
    return [Path(names[chunk_id]).name for chunk_id, _ in hits]


def test_ingestion_commits_each_passages_entities_and_references_with_it(corpus, conn):
    named = conn.execute(
        "SELECT d.path, m.entity_key, m.kind FROM mentions m JOIN chunks c ON c.id = m.chunk_id "
        "JOIN documents d ON d.id = c.document_id").fetchall()
    by_document: dict[str, set[str]] = {}
    for path, key, _ in named:
        by_document.setdefault(Path(path).name, set()).add(key)
    assert {"qc-2031", "zp-2041", "湖西工場", "kp-2041-03"} <= by_document["QC-2031_報告書.md"]
    assert {"湖西工場", "本社工場", "品質責任者"} <= by_document["組織図.md"]
    references = {(s, t, k) for s, t, k in conn.execute(
        "SELECT source_key, target_key, kind FROM relations")}
    assert ("就業規則第18条", "育児介護休業規程", "reference") in references
    assert ("湖西工場", "本社工場", "row") not in references  # two rows, not one
    assert conn.execute(query("broken_graph"), {"uris": None}).fetchall() == []


def test_a_question_reaches_the_passage_one_reference_away(corpus, conn):
    # The organisation chart names 湖西工場 and 品質責任者, not QC-2031: QC-2031's report
    # names 湖西工場.
    found = paths(conn, leg(conn, QUESTIONS[0], ["all-employees"]))
    assert found[0] == "組織図.md"
    # 就業規則 第18条 refers to 育児介護休業規程: its passage is reached.
    assert "育児介護休業規程.md" in paths(conn, leg(conn, QUESTIONS[2], ["all-employees"]))


def test_a_relation_only_a_secret_document_holds_reaches_no_one_outside_its_groups(
        corpus, conn, settings, instance):
    before = {q: leg(conn, q, ["all-employees"]) for q in QUESTIONS}
    _write(corpus, SECRET)
    assert ingest_paths([corpus], None, settings, instance).ingested == 1
    # An outsider's leg, scores included, is what it was: the secret passage is no evidence.
    assert {q: leg(conn, q, ["all-employees"]) for q in QUESTIONS} == before
    # hr reaches 本社工場's record from QC-2031 through the secret passage; no one else does.
    assert "検査記録.md" in paths(conn, leg(conn, "QC-2031", ["all-employees", "hr"]))
    assert "検査記録.md" not in paths(conn, leg(conn, "QC-2031", ["all-employees"]))

    def secret_rows() -> int:
        return conn.execute(
            "SELECT count(*) FROM mentions m JOIN chunks c ON c.id = m.chunk_id "
            "JOIN documents d ON d.id = c.document_id WHERE d.path LIKE '%%極秘%%'").fetchone()[0]

    # Re-permissioned to all-employees, then away again: the leg follows at once.
    uri = str(corpus / "hr/極秘メモ.md")
    conn.execute(query("regroup_document"), {"uri": uri, "groups": ["all-employees"],
                                              "rule": "test"})
    assert "検査記録.md" in paths(conn, leg(conn, "QC-2031", ["all-employees"]))
    conn.execute(query("regroup_document"), {"uri": uri, "groups": ["hr"], "rule": "test"})
    assert {q: leg(conn, q, ["all-employees"]) for q in QUESTIONS} == before
    # Deleted: its mentions and references leave with its passages.
    assert secret_rows() > 0
    shutil.rmtree(corpus / "hr")
    assert ingest_paths([corpus], None, settings, instance).deleted == 1
    assert secret_rows() == 0
    assert conn.execute("SELECT count(*) FROM relations r WHERE NOT EXISTS "
                        "(SELECT 1 FROM chunks c WHERE c.id = r.chunk_id)").fetchone()[0] == 0
    assert "検査記録.md" not in paths(conn, leg(conn, "QC-2031", ["all-employees", "hr"]))


_ASSIGNMENTS = st.lists(st.sets(st.sampled_from(GROUPS), max_size=2),
                        min_size=len(CORPUS) + len(SECRET), max_size=len(CORPUS) + len(SECRET))


@pytest.fixture
def full_corpus(corpus, settings, instance) -> Path:
    _write(corpus, SECRET)
    assert ingest_paths([corpus], None, settings, instance).ingested == 1
    return corpus


@hypothesis_settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(assignment=_ASSIGNMENTS, caller=st.sets(st.sampled_from(GROUPS), min_size=1),
       question=st.sampled_from(QUESTIONS), exact=st.booleans())
def test_the_graph_leg_reads_only_the_callers_passages_and_counts_only_them(
        full_corpus, conn, assignment, caller, question, exact):
    """Under any groups and either plan: every passage the leg returns is the caller's, and
    what it returns, scores included, is what it would be if the documents the caller may not
    read did not exist (deleted in a transaction rolled back): their entities, mentions and
    references are no evidence. Both plans return the same."""
    uris = sorted(str(p) for p in full_corpus.rglob("*.md"))
    for uri, groups in zip(uris, assignment, strict=True):
        conn.execute(query("regroup_document"),
                     {"uri": uri, "groups": sorted(groups), "rule": "test"})
    readable = {chunk_id for chunk_id, groups in conn.execute(
        "SELECT id, allowed_groups FROM chunks") if set(groups) & caller}
    found = leg(conn, question, caller, exact)
    assert {chunk_id for chunk_id, _ in found} <= readable
    assert leg(conn, question, caller, not exact) == found
    with conn.transaction():
        conn.execute("DELETE FROM documents WHERE NOT allowed_groups && %s", (sorted(caller),))
        assert leg(conn, question, caller, exact) == found
        raise psycopg.Rollback
