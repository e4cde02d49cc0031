"""Passages read from scans (issue 44) as the doors show them: every hit, citation, streamed
passage, document passage and MCP result carries `ocr` beside its page, true for a passage whose
page OCR read and false for every other. The real app and database over the small corpus of
tests/web_app.py, one document's passages marked in the database as the pipeline marks a scan's
(chunks.ocr, sql/018_ocr.sql): what is shown here does not depend on how the page was read."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from kb_core.api_tokens import TokenStore
from kb_core.database import connect
from tests.integration.test_mcp import call, http_session
from tests.integration.test_service import streamed_events
from tests.web_app import HOLIDAY_QUESTION, document_id, free_port, index_corpus, served, web_app

pytestmark = pytest.mark.anyio

SCANNED = "休暇規程.md"  # its passages are marked as read from a one-page scan
CANTEEN_QUESTION = "社員食堂の営業時間は？"  # answered from 案内.html, a document's own text


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def corpus(settings, instance, tmp_path) -> Path:
    """The corpus indexed, 休暇規程 as if its one page had been read from a scan."""
    root = index_corpus(tmp_path / "corpus", settings, instance)
    with connect(settings.database_url, autocommit=True) as conn:
        conn.execute("UPDATE chunks SET ocr = true, location = 'p.1' WHERE document_id = %s",
                     (document_id(conn, SCANNED),))
    return root


@pytest.fixture
def tokens(settings, corpus) -> dict[str, str]:
    with connect(settings.database_url, autocommit=True) as conn:
        return {name: TokenStore.create(conn, name, groups)
                for name, groups in (("portal", ["all-employees"]), ("hr-bot", ["hr"]))}


@pytest.fixture
async def client(settings, corpus) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=web_app(settings)) as c:
        yield c


@pytest.fixture
def mcp_url(settings, corpus) -> Iterator[str]:
    with served(web_app(settings), free_port()) as url:
        yield f"{url}/mcp"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def scanned(passage: dict) -> bool:
    """Whether `passage` (a hit, citation or offered passage, named by path) is of the scan."""
    return passage["path"].endswith(SCANNED)


async def ask(client: AsyncTestClient, question: str, token: str) -> dict:
    response = await client.post("/v1/ask", json={"question": question}, headers=bearer(token))
    assert response.status_code == 200, response.text
    return response.json()


async def test_hits_citations_and_passages_over_http_say_whether_their_page_was_read_from_a_scan(
    client, tokens
):
    search = await client.post("/v1/search", json={"query": HOLIDAY_QUESTION, "k": 10},
                               headers=bearer(tokens["portal"]))
    assert search.status_code == 200, search.text
    hits = search.json()["hits"]
    assert {scanned(h) for h in hits} == {True, False}, "both kinds of passage are found"
    assert [(h["ocr"], h["page"]) for h in hits] == [
        (True, "p.1") if scanned(h) else (False, None) for h in hits]
    pay = await client.post("/v1/search", json={"query": "給与支給日"},
                            headers=bearer(tokens["hr-bot"]))
    assert [h["ocr"] for h in pay.json()["hits"]] == [False]

    holiday = await ask(client, HOLIDAY_QUESTION, tokens["portal"])
    assert holiday["found"] and holiday["citations"]
    assert all(scanned(c) and c["ocr"] is True and c["page"] == "p.1"
               for c in holiday["citations"])
    canteen = await ask(client, CANTEEN_QUESTION, tokens["portal"])
    assert canteen["found"] and canteen["citations"]
    assert all(not scanned(c) and c["ocr"] is False for c in canteen["citations"])

    # Streamed: the passages offered before the answer is written say it too.
    events = await streamed_events(client, HOLIDAY_QUESTION, tokens["portal"])
    offered = next(data for name, data in events if name == "citations")["passages"]
    assert {scanned(p) for p in offered} == {True, False}
    assert [p["ocr"] for p in offered] == [scanned(p) for p in offered]
    done = next(data for name, data in events if name == "done")
    assert done["citations"] == holiday["citations"]

    for answer, ocr in ((holiday, True), (canteen, False)):
        cited = answer["citations"][0]
        document = await client.get(f"/v1/documents/{cited['document_id']}",
                                    params={"chunk_id": cited["chunk_id"]},
                                    headers=bearer(tokens["portal"]))
        assert document.status_code == 200, document.text
        passages = document.json()["passages"]
        assert passages and [p["ocr"] for p in passages] == [ocr] * len(passages)


async def test_the_assistants_tools_say_it_too(mcp_url, tokens):
    async with http_session(mcp_url, tokens["portal"]) as session:
        found = await call(session, "search", query=HOLIDAY_QUESTION, k=10)
        passages = found["passages"]
        assert {scanned(p) for p in passages} == {True, False}
        assert [p["ocr"] for p in passages] == [scanned(p) for p in passages]
        answer = await call(session, "ask", question=HOLIDAY_QUESTION)
        assert answer["citations"] and all(c["ocr"] is True for c in answer["citations"])
        top = next(p for p in passages if scanned(p))
        around = await call(session, "get_document", document_id=top["document_id"],
                            chunk_id=top["chunk_id"])
        assert [p["ocr"] for p in around["passages"]] == [True] * len(around["passages"])
        canteen = await call(session, "ask", question=CANTEEN_QUESTION)
        assert canteen["citations"] and all(c["ocr"] is False for c in canteen["citations"])


async def test_an_entity_cards_passages_and_evidence_say_it_too(client, mcp_url, tokens):
    """人事部 is named in the scan only, beside 休暇規程第5条; 給与規程 in the hr group's
    document's own text, beside 給与規程第10条."""
    for name, caller, ocr in (("人事部", "portal", True), ("給与規程", "hr-bot", False)):
        response = await client.get(f"/v1/entities/{name}", headers=bearer(tokens[caller]))
        assert response.status_code == 200, response.text
        card = response.json()
        passages = [p for d in card["documents"] for p in d["passages"]]
        assert passages and [p["ocr"] for p in passages] == [ocr] * len(passages)
        evidence = [e for r in card["relations"] for e in r["evidence"]]
        assert evidence and [(e["ocr"], e["learned_fact"]) for e in evidence] == [
            (ocr, False)] * len(evidence)

    async with http_session(mcp_url, tokens["portal"]) as session:
        found = await call(session, "entity", name="人事部")
        mentions = found["mentions"] + [e for n in found["neighbours"] for e in n["evidence"]]
        assert mentions and all(m["ocr"] is True for m in mentions)
