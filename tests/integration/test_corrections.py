"""Corrections the system learns from, without leaks: the real Litestar app, real PostgreSQL,
real Dagster ingestion runs, the deterministic `hashing` embedder. A correction is served to
nobody until approved, then only to the groups every corrected document grants, whatever
re-permission, edit, rebuild or rejection happens next."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import dagster as dg
import psycopg
import pytest
from litestar.testing import AsyncTestClient

from kb_core.api_tokens import TokenStore
from kb_core.callers import Caller
from kb_core.embeddings import embedder_for_index
from kb_core.generations import (
    create_generation,
    publish_generation,
    record_evaluation,
    use_generation,
)
from kb_core.learned_facts import fact_counts, index_learned_facts
from kb_core.queries import query
from kb_core.settings import EmbedderSettings, Settings
from kb_pipeline.definitions import make_definitions
from kb_pipeline.defs.learned_facts.jobs import LEARNED_FACTS_JOB
from kb_pipeline.defs.learned_facts.sensors import learned_facts_sensor
from kb_pipeline.defs.resources import PostgresResource
from kb_pipeline.in_process import ingest_paths
from kb_pipeline.stages import pipeline_version
from kb_search.corrections import (
    CorrectionError,
    approve_correction,
    corrections_to_review,
    reject_correction,
)
from tests.web_app import HOLIDAY_QUESTION, ask, bearer_headers, index_corpus, web_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

REVIEWERS = "kb-reviewers"
CORRECTION = "2026年4月から、年次有給休暇は取得日の5営業日前までに申請することになりました。"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def corpus(settings: Settings, instance: dg.DagsterInstance, tmp_path: Path) -> Path:
    return index_corpus(tmp_path / "corpus", settings, instance)


@pytest.fixture
def tokens(conn: psycopg.Connection) -> dict[str, dict[str, str]]:
    return bearer_headers(conn, {
        "staff": ["all-employees"], "colleague": ["all-employees"], "hr": ["hr"],
        "reviewer": ["all-employees", REVIEWERS], "hr-reviewer": ["hr", REVIEWERS]})


@pytest.fixture
async def client(settings: Settings, corpus: Path) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=web_app(settings, reviewer_group=REVIEWERS)) as c:
        yield c


def embedder_for(model: str):  # noqa: ANN201 - kb_core.learned_facts.EmbedderFor
    return embedder_for_index(model, EmbedderSettings("hashing"))


async def learned(client: AsyncTestClient, headers: dict[str, str],
                  question: str = HOLIDAY_QUESTION) -> list[dict]:
    """The learned facts that reach this caller for `question`: search hits and citations."""
    search = await client.post("/v1/search", json={"query": question, "k": 50},
                               headers=headers)
    assert search.status_code == 200, search.text
    facts = [h for h in search.json()["hits"] if h["learned_fact"]]
    return facts + [c for c in (await ask(client, headers, question))["citations"]
                    if c["learned_fact"]]


async def submit(client: AsyncTestClient, headers: dict[str, str], text: str = CORRECTION,
                 question: str = HOLIDAY_QUESTION) -> int:
    answer = await ask(client, headers, question)
    response = await client.post("/v1/corrections", headers=headers, json={
        "query_id": answer["query_id"], "correction": text,
        "chunk_ids": [c["chunk_id"] for c in answer["citations"] if not c["learned_fact"]]})
    assert response.status_code == 201, response.text
    return response.json()["id"]


async def test_a_correction_reaches_nobody_until_approved_then_only_its_documents_groups(
        client, tokens, conn):
    correction_id = await submit(client, tokens["staff"])
    stored = conn.execute("SELECT status, submitter_name, question FROM corrections").fetchone()
    assert stored == ("pending", "staff", HOLIDAY_QUESTION)
    assert conn.execute("SELECT path, checksum ~ '^[0-9a-f]{64}$' FROM correction_sources"
                        ).fetchall() == [("corpus/all/休暇規程.md", True)]
    for caller in tokens:
        assert await learned(client, tokens[caller]) == [], caller

    # Only reviewers review, and a reviewer sees only corrections of documents it may read.
    assert (await client.get("/v1/corrections", headers=tokens["staff"])).status_code == 403
    listed = (await client.get("/v1/corrections", headers=tokens["reviewer"])).json()
    assert [c["id"] for c in listed["corrections"]] == [correction_id]
    assert listed["corrections"][0]["passages"][0]["path"] == "corpus/all/休暇規程.md"
    assert (await client.get("/v1/corrections", headers=tokens["hr-reviewer"])
            ).json()["corrections"] == []
    refused = await client.post(f"/v1/corrections/{correction_id}/approve",
                                headers=tokens["hr-reviewer"])
    assert refused.status_code == 404

    cached = await ask(client, tokens["colleague"], HOLIDAY_QUESTION)  # now in the cache
    assert not [c for c in cached["citations"] if c["learned_fact"]]
    approved = await client.post(f"/v1/corrections/{correction_id}/approve",
                                 headers=tokens["reviewer"])
    assert approved.status_code == 200, approved.text
    facts = await learned(client, tokens["colleague"])
    assert facts, "the approved correction is found by the next employee"
    assert all(f["ocr"] is False for f in facts)  # typed by an employee, not read from a scan
    cited = [f for f in facts if "quote" in f]
    assert cited and cited[0]["title"] == "利用者による訂正（承認済み）"
    assert cited[0]["heading"].startswith("承認: reviewer（")
    assert CORRECTION[:40] in cited[0]["quote"]
    # Numbered as the answer cites it, as any passage is: 1, 2, ... in reading order.
    answer = await ask(client, tokens["colleague"], HOLIDAY_QUESTION)
    numbers = [c["n"] for c in answer["citations"]]
    assert any(c["learned_fact"] for c in answer["citations"])
    assert numbers == list(range(1, len(numbers) + 1)) == [
        int(n) for n in dict.fromkeys(re.findall(r"\[(\d+)\]", answer["answer"]))]
    assert await learned(client, tokens["hr"]) == []
    again = await client.post(f"/v1/corrections/{correction_id}/approve",
                              headers=tokens["reviewer"])
    assert again.status_code == 400 and again.json()["error"] == "invalid_correction"


async def test_a_correction_must_name_passages_of_the_callers_own_answer(client, tokens):
    answer = await ask(client, tokens["staff"], HOLIDAY_QUESTION)
    chunk_ids = [c["chunk_id"] for c in answer["citations"]]
    body = {"query_id": answer["query_id"], "correction": CORRECTION, "chunk_ids": chunk_ids}
    someone_else = await client.post("/v1/corrections", json=body, headers=tokens["colleague"])
    assert someone_else.status_code == 400
    other_passage = {**body, "chunk_ids": [max(chunk_ids) + 1000]}
    assert (await client.post("/v1/corrections", json=other_passage,
                              headers=tokens["staff"])).status_code == 400
    assert (await client.post("/v1/corrections", json={**body, "groups": ["hr"]},
                              headers=tokens["staff"])).status_code == 400
    assert (await client.post("/v1/corrections", json=body)).status_code == 401


async def test_a_fact_follows_re_permission_edits_and_rejection(client, tokens, conn, corpus,
                                                                settings, instance):
    correction_id = await submit(client, tokens["staff"])
    approve_correction(conn, correction_id, "佐藤", embedder_for)
    assert await learned(client, tokens["colleague"])
    version = conn.execute(query("index_version")).fetchone()[0]

    # Re-permission: the document now belongs to hr alone, and so does the fact.
    uri = str(corpus / "all" / "休暇規程.md")
    conn.execute(query("regroup_document"), {"uri": uri, "groups": ["hr"], "rule": "test"})
    assert await learned(client, tokens["colleague"]) == []
    assert await learned(client, tokens["hr"])
    conn.execute(query("regroup_document"),
                 {"uri": uri, "groups": ["all-employees"], "rule": "test"})

    # An edit retires the correction, for review again; approving it again serves it again.
    path = corpus / "all" / "休暇規程.md"
    path.write_text(path.read_text(encoding="utf-8") + "\n## 第6条（附則）\n施行する。\n",
                    encoding="utf-8")
    assert ingest_paths([corpus], None, settings, instance).ingested == 1
    assert conn.execute("SELECT status FROM corrections").fetchone()[0] == "retired"
    assert conn.execute(query("index_version")).fetchone()[0] > version
    assert await learned(client, tokens["colleague"]) == []
    (waiting,) = corrections_to_review(conn)
    assert waiting.status == "retired" and waiting.passages[0].changed
    approve_correction(conn, correction_id, "佐藤", embedder_for)
    assert await learned(client, tokens["colleague"])

    reject_correction(conn, correction_id, "佐藤", note="規程の改定で不要になった")
    assert await learned(client, tokens["colleague"]) == []
    assert fact_counts(conn).rejected == 1 and fact_counts(conn).facts == 0
    with pytest.raises(CorrectionError):
        approve_correction(conn, correction_id, "佐藤", embedder_for)

    # A deleted document: the correction can only be rejected.
    pending = await submit(client, tokens["staff"])
    path.unlink()
    ingest_paths([corpus], None, settings, instance)
    with pytest.raises(CorrectionError, match="left the index"):
        approve_correction(conn, pending, "佐藤", embedder_for)


async def test_a_fact_of_documents_sharing_no_group_reaches_nobody(client, tokens, conn):
    both = TokenStore.create(conn, "both", ["all-employees", "hr"])
    headers = {"Authorization": f"Bearer {both}"}
    answer = await ask(client, headers, "給与支給日と有給休暇の申請期限")
    # One passage of each document the answer was given (the query log keeps them all; the
    # answer may quote only one).
    (hits,) = conn.execute("SELECT hits FROM query_log WHERE id = %s",
                           (answer["query_id"],)).fetchone()
    by_folder = {}
    for hit in hits:
        by_folder.setdefault(hit["path"].split("/")[-2], hit["chunk_id"])
    assert set(by_folder) == {"all", "hr"}
    response = await client.post("/v1/corrections", headers=headers, json={
        "query_id": answer["query_id"], "correction": "給与支給日は毎月20日に変わった。",
        "chunk_ids": list(by_folder.values())})
    approve_correction(conn, response.json()["id"], "佐藤", embedder_for)
    assert fact_counts(conn).visible_to_nobody == 1
    assert await learned(client, headers, "給与支給日は毎月20日") == []


async def test_a_rebuilt_generation_embeds_the_facts_with_its_own_model(client, tokens, conn):
    correction_id = await submit(client, tokens["staff"])
    approve_correction(conn, correction_id, "佐藤", embedder_for)
    version = pipeline_version(embedder_for("hashing/terms-384"))
    gen = create_generation(conn, version)
    use_generation(conn, gen.id)
    conn.execute("INSERT INTO documents SELECT * FROM public.documents")
    conn.execute("INSERT INTO chunks SELECT * FROM public.chunks")
    conn.execute("INSERT INTO chunk_vectors SELECT * FROM public.chunk_vectors")
    conn.execute("INSERT INTO index_settings SELECT * FROM public.index_settings")
    assert conn.execute("SELECT count(*) FROM learned_facts").fetchone()[0] == 0
    assert index_learned_facts(conn, embedder_for) == 1
    assert index_learned_facts(conn, embedder_for) == 0
    # Each generation's facts follow that generation's documents.
    conn.execute("UPDATE documents SET allowed_groups = '{hr}'")
    groups = "SELECT allowed_groups FROM learned_facts"
    assert conn.execute(groups).fetchone()[0] == ["hr"]
    use_generation(conn, None)
    assert conn.execute(groups).fetchone()[0] == ["all-employees"]
    use_generation(conn, gen.id)
    assert conn.execute(groups).fetchone()[0] == ["hr"]
    conn.execute("UPDATE documents d SET allowed_groups = l.allowed_groups "
                 "FROM public.documents l WHERE l.id = d.id")
    use_generation(conn, None)
    record_evaluation(conn, gen.id, True, {}, None)
    publish_generation(conn, gen.id, version, lambda uri: ([], None))
    facts = await learned(client, tokens["colleague"])
    assert facts and all(f["title"] == "利用者による訂正（承認済み）" for f in facts)


def test_migration_010_is_idempotent(database_url: str) -> None:
    script = (Path(__file__).parents[2] / "sql" / "010_corrections.sql").read_text()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(script.encode())
        assert conn.execute("SELECT count(*) FROM learned_facts").fetchone()[0] == 0





def kb(settings: Settings, home: Path, *args: str) -> dict:
    """`kb ARGS --json` as a user runs it, on this test's database."""
    env = {**os.environ, "KB_HOME": str(home), "KB_DATABASE_URL": settings.database_url,
           "KB_EMBEDDER": "hashing"}
    done = subprocess.run([str(Path(sys.executable).parent / "kb"), *args, "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_the_shell_lists_approves_and_rejects_corrections(client, tokens, settings,
                                                                 tmp_path):
    first, second = await submit(client, tokens["staff"]), await submit(client, tokens["staff"])
    listed = kb(settings, tmp_path, "corrections", "list")["corrections"]
    assert [(c["id"], c["status"], c["submitter_name"]) for c in listed] == [
        (first, "pending", "staff"), (second, "pending", "staff")]
    assert listed[0]["passages"][0]["path"] == "corpus/all/休暇規程.md"
    assert kb(settings, tmp_path, "corrections", "approve", str(first), "--reviewer", "佐藤") == {
        "id": first, "status": "approved", "reviewer": "佐藤"}
    assert kb(settings, tmp_path, "corrections", "reject", str(second))["status"] == "rejected"
    assert kb(settings, tmp_path, "corrections", "list") == {"corrections": []}
    facts = await learned(client, tokens["colleague"])
    assert facts and facts[0]["heading"].startswith("承認: 佐藤（")


async def test_dagster_shows_learned_facts_and_indexes_those_a_generation_lacks(
        client, tokens, conn, settings, instance):
    approve_correction(conn, await submit(client, tokens["staff"]), "佐藤", embedder_for)
    # Another answer's correction, pending (the holiday question is now answered by the fact).
    await submit(client, tokens["staff"], "結婚休暇は7日に増えました。",
                 "結婚したときの特別休暇は何日ですか")
    conn.execute("DELETE FROM learned_facts")  # as after a publication that raced an approval
    postgres = PostgresResource(url=settings.database_url)
    context = dg.build_sensor_context(instance=instance, resources={"postgres": postgres})
    ticked = learned_facts_sensor(context)
    assert len(ticked.run_requests) == 1
    idle = dg.build_sensor_context(instance=instance, cursor=ticked.cursor,
                                   resources={"postgres": postgres})
    assert not learned_facts_sensor(idle).run_requests

    run = make_definitions(settings).resolve_job_def(LEARNED_FACTS_JOB.name).execute_in_process(
        instance=instance)
    (materialized,) = run.asset_materializations_for_node("learned_facts")
    counts = {k: v.value for k, v in materialized.metadata.items()}
    assert counts | {"generation": 1} == {
        "learned_facts": 1, "visible_to_nobody": 0, "pending_review": 1, "approved": 1,
        "rejected": 0, "retired_for_review": 0, "indexed_now": 1, "generation": 1}
    assert await learned(client, tokens["colleague"])


async def test_the_pages_corrections_and_reviews_need_the_sessions_csrf_token(settings, corpus):
    reviewer = Caller(kind="dev", subject="佐藤", groups=("all-employees", REVIEWERS))
    app = web_app(settings, dev_user=reviewer, reviewer_group=REVIEWERS)
    async with AsyncTestClient(app=app, base_url="http://127.0.0.1:8000") as client:
        await client.get("/auth/login", follow_redirects=False)
        page = (await client.get("/")).text
        assert 'data-reviewer="true"' in page
        token = {"X-CSRF-Token": page.split('name="csrf-token" content="')[1].split('"')[0]}
        answer = (await client.post("/v1/ask", json={"question": HOLIDAY_QUESTION},
                                    headers=token)).json()
        body = {"query_id": answer["query_id"], "correction": CORRECTION,
                "chunk_ids": [c["chunk_id"] for c in answer["citations"]]}
        assert (await client.post("/v1/corrections", json=body)).status_code == 403
        submitted = await client.post("/v1/corrections", json=body, headers=token)
        assert submitted.status_code == 201, submitted.text
        approve = f"/v1/corrections/{submitted.json()['id']}/approve"
        assert (await client.post(approve)).status_code == 403
        assert (await client.post(approve, headers=token)).status_code == 200
        cited = (await client.post("/v1/ask", json={"question": HOLIDAY_QUESTION},
                                   headers=token)).json()["citations"]
        assert any(c["learned_fact"] and c["heading"].startswith("承認: 佐藤（") for c in cited)


async def test_a_re_permission_narrows_the_fact_in_its_own_transaction(client, tokens, conn,
                                                                      corpus, settings):
    approve_correction(conn, await submit(client, tokens["staff"]), "佐藤", embedder_for)
    uri = str(corpus / "all" / "休暇規程.md")
    fact_groups = "SELECT allowed_groups FROM learned_facts"
    with psycopg.connect(settings.database_url) as writer:
        writer.execute(query("regroup_document"), {"uri": uri, "groups": ["hr"], "rule": "t"})
        assert writer.execute(fact_groups).fetchone()[0] == ["hr"]  # before it commits
        assert conn.execute(fact_groups).fetchone()[0] == ["all-employees"]  # others: before
        assert await learned(client, tokens["colleague"])
        writer.commit()
    assert conn.execute(fact_groups).fetchone()[0] == ["hr"]
    assert await learned(client, tokens["colleague"]) == []
