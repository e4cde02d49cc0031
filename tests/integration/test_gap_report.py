"""The knowledge-gap report: the real Litestar app and engine over real PostgreSQL and a real
Dagster ingestion of a small corpus (the `hashing` stand-in embedder: grouping quality is
measured in tests/unit/test_gaps.py and by `python -m kb_eval.fit gaps`). A reviewer sees a
question only when every group of its asker is one of its own, and a document only when it may
read it, whatever the askers' and reviewers' groups (a property test)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import dagster as dg
import psycopg
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from litestar.testing import AsyncTestClient

from kb_core.callers import Caller
from kb_core.queries import query
from kb_core.settings import Settings
from kb_pipeline.defs.knowledge_gaps.assets import knowledge_gaps
from kb_pipeline.defs.resources import resources_for
from kb_pipeline.in_process import ingest_paths
from kb_search import open_knowledge_base
from tests.web_app import HOLIDAY_QUESTION, ask, bearer_headers, index_corpus, web_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

REVIEWERS = "kb-reviewers"
PARKING = "駐車場の申し込み方法は？"  # in no document
SEVERANCE = "退職金の計算方法は？"  # in no document either, asked by hr
PARKING_FEE = "駐車場について、有料ですか"
BOTH = "結婚したときの特別休暇は何日ですか？それと駐車場の申込方法は？"  # one part answered


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def corpus(settings: Settings, instance: dg.DagsterInstance, tmp_path: Path) -> Path:
    return index_corpus(tmp_path / "corpus", settings, instance)


@pytest.fixture
def tokens(conn: psycopg.Connection) -> dict[str, dict[str, str]]:
    return bearer_headers(conn, {
        "staff": ["all-employees"], "hr": ["hr"],
        "reviewer": ["all-employees", REVIEWERS], "hr-reviewer": ["hr", REVIEWERS]})


@pytest.fixture
async def client(settings: Settings, corpus: Path) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=web_app(settings, reviewer_group=REVIEWERS)) as c:
        yield c


async def gaps(client: AsyncTestClient, headers: dict[str, str], days: int = 30) -> dict:
    response = await client.get(f"/v1/gaps?days={days}", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def questions_of(report: dict) -> dict[str, int]:
    return {q["question"]: q["asked"] for t in report["topics"] for q in t["questions"]}


async def test_the_report_groups_what_went_unanswered_for_the_reviewers_who_may_see_it(
        client, tokens, conn):
    for _ in range(2):
        parking = await ask(client, tokens["staff"], PARKING)
        assert not parking["found"]
    # A follow-up is listed as it was searched: what it asked.
    fee = await ask(client, tokens["staff"], "それは有料ですか", parking["query_id"])
    assert not fee["found"] and fee["asked_as"] == PARKING_FEE
    both = await ask(client, tokens["staff"], BOTH)
    assert [p["found"] for p in both["parts"]] == [True, False], both["parts"]
    holiday = await ask(client, tokens["staff"], HOLIDAY_QUESTION)
    assert holiday["found"]
    feedback = await client.post("/v1/feedback", headers=tokens["staff"], json={
        "query_id": holiday["query_id"], "helpful": False})
    assert feedback.status_code == 200
    assert not (await ask(client, tokens["hr"], SEVERANCE))["found"]

    # Only reviewers read the report.
    for caller in ("staff", "hr"):
        refused = await client.get("/v1/gaps", headers=tokens[caller])
        assert refused.status_code == 403, caller

    report = await gaps(client, tokens["reviewer"])
    # The same question asked twice is one question; of the multi-part one, the part not found.
    part = both["parts"][1]["question"]
    assert questions_of(report) == {PARKING: 2, PARKING_FEE: 1, part: 1, HOLIDAY_QUESTION: 1}
    assert sum(t["not_found"] for t in report["topics"]) == 4
    assert sum(t["unhelpful"] for t in report["topics"]) == 1
    closest = {d["path"] for t in report["topics"] for d in t["closest"]}
    assert closest and all(p.startswith("corpus/all/") for p in closest), closest
    # Each opens at a passage of its own: one its topic retrieved.
    for d in (d for t in report["topics"] for d in t["closest"]):
        assert conn.execute("SELECT document_id FROM chunks WHERE id = %s",
                            (d["chunk_id"],)).fetchone() == (d["document_id"],)

    # hr's reviewer sees hr's question and none of all-employees' askers: their groups are not
    # all its own. Its closest documents are those hr may read.
    hr_report = await gaps(client, tokens["hr-reviewer"])
    assert questions_of(hr_report) == {SEVERANCE: 1}
    assert {d["path"] for t in hr_report["topics"] for d in t["closest"]} <= {
        "corpus/hr/給与規程.md"}

    # Two answers cited the leave rules (the multi-part one for its first part): cited, so not
    # "never cited"; made two years old by the checksum history, stale, for its readers only.
    cited = conn.execute("SELECT DISTINCT source_uri FROM query_citations").fetchall()
    assert [Path(uri).name for (uri,) in cited] == ["休暇規程.md"]
    conn.execute("UPDATE content_history SET since = now() - interval '2 years' "
                 "WHERE source_uri LIKE '%%休暇規程.md'")
    conn.execute("UPDATE document_sources SET registered_at = now() - interval '60 days'")
    conn.execute("UPDATE schema_migrations SET applied_at = now() - interval '60 days' "
                 "WHERE name = '020_gap_report.sql'")
    report = await gaps(client, tokens["reviewer"])
    assert [(d["path"], d["cited"]) for d in report["stale"]] == [("corpus/all/休暇規程.md", 2)]
    assert [d["path"] for d in report["never_cited"]] == ["corpus/all/案内.html"]
    hr_report = await gaps(client, tokens["hr-reviewer"])
    assert hr_report["stale"] == []
    assert [d["path"] for d in hr_report["never_cited"]] == ["corpus/hr/給与規程.md"]

    # A window that ends before the questions holds none of them.
    conn.execute("UPDATE query_log SET created_at = now() - interval '8 days'")
    assert (await gaps(client, tokens["reviewer"], days=7))["topics"] == []

    # Each question was embedded once for all these readings, and its vector goes with the
    # query log's retention, counted from the last reading that used it.
    assert conn.execute("SELECT count(*) FROM question_vectors").fetchone()[0] == 5
    conn.execute("UPDATE question_vectors SET used_at = now() - interval '91 days' WHERE "
                 "text_sha256 = encode(sha256(convert_to(normalize(%s, NFKC), 'UTF8')), 'hex')",
                 (SEVERANCE,))
    conn.execute(query("purge_query_log"), {"days": 90})
    assert conn.execute("SELECT count(*) FROM question_vectors").fetchone()[0] == 4


async def test_the_checksum_history_keeps_the_age_of_content_not_of_its_file(
        settings, instance, corpus, conn):
    history = "SELECT checksum FROM content_history WHERE source_uri LIKE '%%休暇規程.md' " \
              "ORDER BY id"
    first = conn.execute(history).fetchall()
    assert len(first) == 1
    rules = corpus / "all" / "休暇規程.md"
    rules.touch()  # a new modification time, the same bytes
    ingest_paths([corpus], None, settings, instance)
    assert conn.execute(history).fetchall() == first
    rules.write_text(rules.read_text(encoding="utf-8") + "\n## 第6条（附則）\n施行する。\n",
                     encoding="utf-8")
    ingest_paths([corpus], None, settings, instance)
    assert len(conn.execute(history).fetchall()) == 2
    rules.unlink()  # a deleted file leaves its history with it
    ingest_paths([corpus], None, settings, instance)
    assert conn.execute(history).fetchall() == []


def test_the_weekly_asset_records_counts_and_never_a_question(settings, corpus, instance,
                                                              conn):
    with open_knowledge_base(settings, connections=1, answers=True) as kb:
        kb.questions.ask(Caller(kind="cli", subject="t", groups=("all-employees",)), PARKING)
    result = dg.materialize(
        [knowledge_gaps], instance=instance,
        resources=resources_for(settings))
    assert result.success
    metadata = result.asset_materializations_for_node("knowledge_gaps")[0].metadata
    assert metadata["not_found"].value == 1 and metadata["topics"].value == 1
    assert metadata["days"].value == 7
    shown = json.dumps({k: str(v.value) for k, v in metadata.items()}, ensure_ascii=False)
    assert PARKING not in shown and "駐車場" not in shown


GROUPS = ["all-employees", "hr", "sales", "legal"]
group_sets = st.lists(st.sampled_from(GROUPS), unique=True, max_size=3)


@hypothesis_settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(askers=st.lists(group_sets, min_size=1, max_size=6), reviewer=group_sets,
       readable=st.lists(group_sets, min_size=3, max_size=3),
       cited=st.lists(st.booleans(), min_size=3, max_size=3))
def test_a_reviewer_sees_only_questions_of_askers_within_its_groups(
        settings, corpus, conn, askers, reviewer, readable, cited):
    # The corpus' three documents given arbitrary groups, all two years old and in the catalogue
    # before the window; each asker's question (a gap) retrieved all three and cited `cited`.
    paths = [row[0] for row in conn.execute("SELECT path FROM documents ORDER BY path")]
    for path, groups in zip(paths, readable, strict=True):
        conn.execute("UPDATE documents SET allowed_groups = %s WHERE path = %s", (groups, path))
    conn.execute("UPDATE content_history SET since = now() - interval '2 years'")
    conn.execute("UPDATE document_sources SET registered_at = now() - interval '60 days'")
    conn.execute("UPDATE schema_migrations SET applied_at = now() - interval '60 days' "
                 "WHERE name = '020_gap_report.sql'")
    conn.execute("DELETE FROM query_log")
    hits = json.dumps([{"chunk_id": 0, "path": p, "score": 0.1} for p in paths])
    for n, groups in enumerate(askers):
        query_id = uuid.uuid4()
        conn.execute(
            "INSERT INTO query_log (id, caller_kind, caller_subject, groups, question, answer, "
            "found, verified, answerer, hits, latency_ms) VALUES (%s, 'token', %s, %s, %s, "
            "'該当する記載が見つかりませんでした。', false, true, 'extractive', %s, 1)",
            (query_id, f"asker{n}", groups, f"質問{n}番の答えは", hits))
        conn.execute("INSERT INTO query_citations SELECT %s, source_uri FROM documents "
                     "WHERE path = ANY(%s)", (query_id, [p for p, c in zip(paths, cited,
                                                                          strict=True) if c]))
    with open_knowledge_base(settings, connections=1, answers=False) as kb:
        report = kb.gaps.report(Caller(kind="jwt", subject="r", groups=tuple(reviewer)))
        everything = kb.gaps.report(None)  # the operator at the shell
    assert {q.question for t in report.topics for q in t.questions} == {
        f"質問{n}番の答えは" for n, groups in enumerate(askers) if set(groups) <= set(reviewer)}
    allowed = {p for p, groups in zip(paths, readable, strict=True) if set(groups) & set(reviewer)}
    assert {d.path for t in report.topics for d in t.closest} <= allowed
    assert {d.path for d in report.stale} == {p for p, c in zip(paths, cited, strict=True)
                                              if c and p in allowed}
    assert {d.path for d in report.never_cited} == {p for p, c in zip(paths, cited, strict=True)
                                                    if not c and p in allowed}
    assert len({q.question for t in everything.topics for q in t.questions}) == len(askers)
    assert len(everything.stale) + len(everything.never_cited) == len(paths)
