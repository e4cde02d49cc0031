"""Conversations reopened over HTTP: the recent questions name each one's latest answer, and
GET /v1/conversations/{query_id} gives back the chain of turns ending there, the caller's own
only, each answer shown only while the caller may still read every passage it cited. The real
app and database with the samples indexed by the real embedder; employees sign in with JWTs
whose groups change between turns."""

from __future__ import annotations

import time
import uuid

import jwt
import pytest
from litestar.testing import AsyncTestClient

from kb_core.database import connect
from tests.integration.test_conversations import LEAVE, ask
from tests.integration.test_service import AUDIENCE, ISSUER, bearer

pytestmark = pytest.mark.anyio

HALF_DAY = "じゃあ、半日単位でも取れますか"  # read as a follow-up of LEAVE
OVERTIME = "時間外勤務の割増賃金率はいくらですか"  # answered from hr's 給与規程


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def token(key, subject: str, groups: list[str]) -> str:
    """An employee's JWT: `subject` tells one employee from another, whatever the groups."""
    now = int(time.time())
    return jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "iat": now,
                       "exp": now + 300, "groups": groups},
                      key, algorithm="RS256", headers={"kid": "k1"})


async def reopen(client: AsyncTestClient, employee: str, query_id: str):
    return await client.get(f"/v1/conversations/{query_id}", headers=bearer(employee))


async def test_recent_questions_name_the_latest_answer_of_each_beside_the_questions_alone(
        client, signing_key):
    employee = token(signing_key, f"emp-{uuid.uuid4()}", ["all-employees"])
    first = await ask(client, employee, LEAVE)
    half_day = await ask(client, employee, HALF_DAY, first["query_id"])
    again = await ask(client, employee, LEAVE)
    response = await client.get("/v1/recent-questions", headers=bearer(employee))
    assert response.status_code == 200
    recent = response.json()
    assert recent["questions"] == [LEAVE, HALF_DAY]
    assert [(i["question"], i["query_id"]) for i in recent["items"]] == [
        (LEAVE, again["query_id"]), (HALF_DAY, half_day["query_id"])]
    assert all(i["asked_at"] for i in recent["items"])


async def test_a_conversation_reopens_oldest_first_as_it_was_answered(client, signing_key):
    employee = token(signing_key, f"emp-{uuid.uuid4()}", ["all-employees"])
    asked = [await ask(client, employee, LEAVE)]
    asked.append(await ask(client, employee, HALF_DAY, asked[0]["query_id"]))
    response = await reopen(client, employee, asked[1]["query_id"])
    assert response.status_code == 200, response.text
    turns = response.json()["turns"]
    assert [t["query_id"] for t in turns] == [a["query_id"] for a in asked]
    assert [t["question"] for t in turns] == [LEAVE, HALF_DAY]
    assert turns[1]["asked_as"] == asked[1]["asked_as"] != HALF_DAY
    for turn, answer in zip(turns, asked, strict=True):
        assert turn["answer_shown"] and turn["answer"] == answer["answer"]
        assert (turn["found"], turn["verified"]) == (answer["found"], answer["verified"])
        shown = ["n", "chunk_id", "document_id", "path", "title", "heading", "quote",
                 "context_before", "context_after"]
        assert [{k: c[k] for k in shown} for c in turn["citations"]] == [
            {k: c[k] for k in shown} for c in answer["citations"]]
    # Reopened at its first answer: that turn alone.
    first = (await reopen(client, employee, asked[0]["query_id"])).json()["turns"]
    assert [t["query_id"] for t in first] == [asked[0]["query_id"]]


async def test_another_callers_conversation_is_the_same_404_as_one_never_given_or_purged(
        client, signing_key, sample_index_url):
    employee = token(signing_key, f"emp-{uuid.uuid4()}", ["all-employees"])
    first = await ask(client, employee, LEAVE)
    second = await ask(client, employee, HALF_DAY, first["query_id"])
    other = token(signing_key, f"emp-{uuid.uuid4()}", ["all-employees"])
    refused = [await reopen(client, other, second["query_id"]),
               await reopen(client, employee, str(uuid.uuid4()))]
    with connect(sample_index_url, autocommit=True) as conn:  # as the log's retention does
        conn.execute("DELETE FROM query_log WHERE id = %s", (first["query_id"],))
    refused.append(await reopen(client, employee, first["query_id"]))
    assert [r.status_code for r in refused] == [404] * 3
    assert len({r.text for r in refused}) == 1
    assert refused[0].json()["error"] == "unknown_query"
    # The chain ends where the purge cut it.
    rest = (await reopen(client, employee, second["query_id"])).json()["turns"]
    assert [t["query_id"] for t in rest] == [second["query_id"]]


async def test_an_answer_citing_a_passage_the_caller_may_no_longer_read_is_withheld(
        client, signing_key, sample_index_url):
    subject = f"emp-{uuid.uuid4()}"
    in_hr = token(signing_key, subject, ["all-employees", "hr"])
    salary = await ask(client, in_hr, OVERTIME)
    assert any(c["path"].endswith("hr/給与規程.md") for c in salary["citations"])
    left_hr = token(signing_key, subject, ["all-employees"])  # the same employee, out of hr
    leave = await ask(client, left_hr, LEAVE, salary["query_id"])

    response = await reopen(client, left_hr, leave["query_id"])
    assert response.status_code == 200
    withheld, shown = response.json()["turns"]
    assert withheld == {"query_id": salary["query_id"], "question": OVERTIME,
                        "asked_as": OVERTIME, "asked_at": withheld["asked_at"],
                        "found": True, "verified": salary["verified"],
                        "answer_shown": False, "answer": None, "citations": []}
    assert shown["answer_shown"] and shown["answer"] == leave["answer"]
    # Nothing of hr's document: not its name, its path or a word of what it says.
    for secret in ("給与規程", "hr/", salary["answer"], *(c["quote"] for c in salary["citations"])):
        assert secret not in response.text
    # Back in hr, the same employee reads it again.
    again = (await reopen(client, in_hr, leave["query_id"])).json()["turns"]
    assert again[0]["answer"] == salary["answer"]

    # A cited passage that has left the index is unreadable too.
    with connect(sample_index_url, autocommit=True) as conn:
        conn.execute("UPDATE query_log SET cited_chunks = cited_chunks || "
                     "(SELECT max(id) + 1000 FROM chunks) WHERE id = %s", (leave["query_id"],))
    gone = (await reopen(client, left_hr, leave["query_id"])).json()["turns"][1]
    assert not gone["answer_shown"] and gone["answer"] is None and gone["citations"] == []
