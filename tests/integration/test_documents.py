"""Opening a cited source over HTTP (`GET /v1/documents/{id}`, `?chunk_id=`, `/original`) and
the caller's recent questions: the real app and database, API tokens of two groups."""

from __future__ import annotations

import hashlib
import os
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from kb_core.database import connect
from kb_core.queries import query
from kb_search.sources import indexed_original, verified_copy
from tests.web_app import HOLIDAY_QUESTION, bearer_headers, document_id, index_corpus, web_app

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def corpus(settings, instance, tmp_path) -> Path:
    return index_corpus(tmp_path / "corpus", settings, instance)


@pytest.fixture
def headers(settings, corpus) -> dict[str, dict[str, str]]:
    with connect(settings.database_url, autocommit=True) as conn:
        return bearer_headers(conn, {"portal": ["all-employees"], "hr-bot": ["hr"]})


@pytest.fixture
def ids(settings, corpus) -> dict[str, int]:
    with connect(settings.database_url, autocommit=True) as conn:
        return {name: document_id(conn, name)
                for name in ("休暇規程.md", "案内.html", "給与規程.md")}


def chunk_ids(settings, document: int) -> list[int]:
    with connect(settings.database_url, autocommit=True) as conn:
        return [r[0] for r in conn.execute(
            "SELECT id FROM chunks WHERE document_id = %s ORDER BY chunk_index", (document,))]


@pytest.fixture
async def client(settings, corpus) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=web_app(settings)) as c:
        yield c


async def test_a_passage_comes_with_its_neighbours_and_the_documents_metadata(
    client, settings, headers, ids
):
    chunks = chunk_ids(settings, ids["休暇規程.md"])
    assert len(chunks) >= 4
    response = await client.get(f"/v1/documents/{ids['休暇規程.md']}",
                                params={"chunk_id": chunks[2]}, headers=headers["portal"])
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["path"].endswith("all/休暇規程.md") and not body["path"].startswith("/")
    assert "source_uri" not in body and str(settings.docs_dirs[0]) not in response.text
    assert body["title"] == "休暇規程" and body["chunks"] == len(chunks)
    assert [p["chunk_id"] for p in body["passages"]] == chunks[1:4]
    assert [p["cited"] for p in body["passages"]] == [False, True, False]
    assert body["original_url"] is None

    metadata = await client.get(f"/v1/documents/{ids['休暇規程.md']}", headers=headers["portal"])
    assert metadata.status_code == 200 and metadata.json()["passages"] == []


async def test_a_document_outside_the_callers_groups_reads_as_one_that_does_not_exist(
    client, settings, headers, ids
):
    salary = ids["給与規程.md"]
    [salary_chunk] = chunk_ids(settings, salary)
    holiday_chunk = chunk_ids(settings, ids["休暇規程.md"])[0]
    missing = await client.get("/v1/documents/999999999", headers=headers["portal"])
    assert missing.status_code == 404
    for path, params in ((f"/v1/documents/{salary}", {}),
                         (f"/v1/documents/{salary}", {"chunk_id": salary_chunk}),
                         # A passage of a readable document asked for under another one.
                         (f"/v1/documents/{ids['休暇規程.md']}", {"chunk_id": salary_chunk}),
                         (f"/v1/documents/{salary}", {"chunk_id": holiday_chunk})):
        response = await client.get(path, params=params, headers=headers["portal"])
        assert response.status_code == 404, (path, params, response.text)
        assert response.json() == missing.json()
    allowed = await client.get(f"/v1/documents/{salary}", params={"chunk_id": salary_chunk},
                               headers=headers["hr-bot"])
    assert allowed.status_code == 200 and "25日" in allowed.json()["passages"][0]["content"]
    assert (await client.get(f"/v1/documents/{salary}")).status_code == 401


async def test_identifiers_out_of_range_are_refused_with_400(client, headers):
    for path in ("/v1/documents/0", f"/v1/documents/{2**53 + 1}", "/v1/documents/1?chunk_id=-1"):
        response = await client.get(path, headers=headers["portal"])
        assert response.status_code == 400, (path, response.text)


async def test_a_query_parameter_the_operation_does_not_take_is_refused(client, headers, ids):
    document = ids["休暇規程.md"]
    for path in (f"/v1/documents/{document}?chunk=1", f"/v1/documents/{document}/original?x=1",
                 "/v1/recent-questions?limit=3"):
        response = await client.get(path, headers=headers["portal"])
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"] == "invalid_request"
    ok = await client.get(f"/v1/documents/{document}", headers=headers["portal"])
    assert ok.status_code == 200


async def test_originals_cannot_be_downloaded_unless_the_operator_turns_it_on(
    client, headers, ids
):
    response = await client.get(f"/v1/documents/{ids['休暇規程.md']}/original",
                                headers=headers["portal"])
    assert response.status_code == 404


async def test_an_original_downloads_as_an_attachment_only_while_its_checksum_matches(
    settings, corpus, headers, ids
):
    async with AsyncTestClient(app=web_app(settings, document_downloads=True)) as client:
        page = ids["案内.html"]
        view = await client.get(f"/v1/documents/{page}", headers=headers["portal"])
        assert view.json()["original_url"] == f"/v1/documents/{page}/original"
        response = await client.get(f"/v1/documents/{page}/original", headers=headers["portal"])
        assert response.status_code == 200, response.text
        original = (corpus / "all" / "案内.html").read_bytes()
        assert response.content == original
        # An HTML original must never render from this origin.
        assert response.headers["content-type"] == "application/octet-stream"
        assert response.headers["content-disposition"].startswith("attachment;")
        assert "filename*=UTF-8''%E6%A1%88%E5%86%85.html" in response.headers[
            "content-disposition"]
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "sandbox" in response.headers["content-security-policy"]
        assert "default-src 'none'" in response.headers["content-security-policy"]

        outside = await client.get(f"/v1/documents/{ids['給与規程.md']}/original",
                                   headers=headers["portal"])
        assert outside.status_code == 404

        # Edited since indexing (same size, other bytes): the indexed checksum no longer holds.
        (corpus / "all" / "案内.html").write_bytes(original.replace(b"11", b"12"))
        assert hashlib.sha256((corpus / "all" / "案内.html").read_bytes()).hexdigest() != \
            hashlib.sha256(original).hexdigest()
        changed = await client.get(f"/v1/documents/{page}/original", headers=headers["portal"])
        assert changed.status_code == 409 and changed.json()["error"] == "document_changed"
        (corpus / "all" / "案内.html").write_bytes(original + b"<p>grown</p>")
        grown = await client.get(f"/v1/documents/{page}/original", headers=headers["portal"])
        assert grown.status_code == 409


async def test_a_large_original_is_checked_and_sent_from_a_copy_never_read_whole(
    settings, corpus, headers, ids
):
    # A 20 MiB original, its indexed checksum and size made to match.
    page, path = ids["案内.html"], corpus / "all" / "案内.html"
    content = os.urandom(20 * 2**20)
    path.write_bytes(content)
    with connect(settings.database_url, autocommit=True) as conn:
        conn.execute("UPDATE documents SET checksum = %s, size_bytes = %s WHERE id = %s",
                     (hashlib.sha256(content).hexdigest(), len(content), page))
        indexed = indexed_original(conn, page, ["all-employees"])
    tracemalloc.start()
    try:
        original = verified_copy(indexed)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"{peak} bytes held to check a {len(content)}-byte file"
    # What was checked is what is sent, whatever happens to the file meanwhile.
    path.write_bytes(b"x" * len(content))
    with original.content as copy:
        assert copy.read() == content

    path.write_bytes(content)
    async with AsyncTestClient(app=web_app(settings, document_downloads=True)) as client:
        response = await client.get(f"/v1/documents/{page}/original", headers=headers["portal"])
    assert response.status_code == 200 and response.content == content
    assert response.headers["content-length"] == str(len(content))


async def test_recent_questions_are_the_callers_own_newest_first(client, headers):
    for question in ("社員食堂の営業時間は？", HOLIDAY_QUESTION, "社員食堂の営業時間は？"):
        response = await client.post("/v1/ask", json={"question": question},
                                     headers=headers["portal"])
        assert response.status_code == 200, response.text
    mine = (await client.get("/v1/recent-questions", headers=headers["portal"])).json()
    assert mine["questions"] == ["社員食堂の営業時間は？", HOLIDAY_QUESTION]
    assert [i["question"] for i in mine["items"]] == mine["questions"]
    others = await client.get("/v1/recent-questions", headers=headers["hr-bot"])
    assert others.json() == {"questions": [], "items": []}


def test_recent_questions_read_only_the_callers_entries_of_the_query_log(conn):
    # 20,000 entries of 2,000 callers: one caller's questions must not cost a scan of them all.
    conn.execute(
        "INSERT INTO query_log (id, created_at, caller_kind, caller_subject, groups, question, "
        "answer, found, verified, answerer, hits, latency_ms) "
        "SELECT gen_random_uuid(), now() - i * interval '1 minute', 'jwt', 'emp-' || i % 2000, "
        "'{g}', 'question ' || i, 'a', true, true, 'extractive', '[]', 1 "
        "FROM generate_series(1, 20000) i")
    conn.execute("ANALYZE query_log")
    plan = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN " + query("recent_questions"),
        {"caller_kind": "jwt", "caller_subject": "emp-7", "limit": 10}))
    assert "query_log_by_caller" in plan and "Seq Scan" not in plan, plan
