"""Follow-up questions over HTTP: `follows` names an earlier answer of the same caller, and the
question is read in that conversation's context (kb_search/follow_ups.py). The real app and
database with the samples indexed by the real embedder; employees sign in with JWTs whose
groups may change between turns."""

from __future__ import annotations

import uuid

import jwt
import pytest
from litestar.testing import AsyncTestClient

from kb_core.database import connect
from tests.integration.test_service import bearer, employee_jwt, streamed_events

pytestmark = pytest.mark.anyio

LEAVE = "年次有給休暇は何日前までに申請が必要ですか"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def ask(client: AsyncTestClient, token: str, question: str,
              follows: str | None = None) -> dict:
    body = {"question": question} | ({"follows": follows} if follows else {})
    response = await client.post("/v1/ask", json=body, headers=bearer(token))
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_follow_up_is_searched_with_the_topic_of_the_answer_it_follows(
        client, signing_key, sample_index_url):
    token = employee_jwt(signing_key, ["all-employees"])
    first = await ask(client, token, LEAVE)
    assert first["asked_as"] == LEAVE
    follow_up = await ask(client, token, "じゃあ、半日単位でも取れますか", first["query_id"])
    assert follow_up["asked_as"].startswith("年次有給休暇")
    assert follow_up["asked_as"].endswith("半日単位でも取れますか")
    assert follow_up["found"]
    assert any(c["path"].endswith("all/就業規則.md") for c in follow_up["citations"]), follow_up
    with connect(sample_index_url) as conn:
        follows, asked_as = conn.execute(
            "SELECT follows, asked_as FROM query_log WHERE id = %s",
            (follow_up["query_id"],)).fetchone()
    assert str(follows) == first["query_id"] and asked_as == follow_up["asked_as"]


async def test_a_question_with_a_topic_of_its_own_is_answered_as_if_asked_alone(
        client, signing_key):
    token = employee_jwt(signing_key, ["all-employees"])
    first = await ask(client, token, LEAVE)
    changed = await ask(client, token, "ZP-2041の保証期間は？", first["query_id"])
    alone = await ask(client, token, "ZP-2041の保証期間は？")
    assert changed["asked_as"] == "ZP-2041の保証期間は？"
    assert changed["answer"] == alone["answer"]
    assert [c["chunk_id"] for c in changed["citations"]] == [
        c["chunk_id"] for c in alone["citations"]]
    # Of its own topic, and in no document: not answered from the earlier topic.
    nowhere = await ask(client, token, "社内ロケット打ち上げ手順はどこですか", first["query_id"])
    assert not nowhere["found"] and nowhere["asked_as"] == "社内ロケット打ち上げ手順はどこですか"


async def test_another_callers_answer_is_the_same_404_as_one_never_given(client, signing_key):
    mine = await ask(client, employee_jwt(signing_key, ["all-employees"]), LEAVE)
    # Another employee: another subject, whatever the groups.
    other = jwt.encode({**jwt.decode(employee_jwt(signing_key, ["all-employees"]),
                                     options={"verify_signature": False}), "sub": "emp-7"},
                       signing_key, algorithm="RS256", headers={"kid": "k1"})
    answers = [await client.post("/v1/ask", headers=bearer(other), json={
        "question": "それは誰に出すの？", "follows": follows, "stream": stream})
        for follows in (mine["query_id"], str(uuid.uuid4())) for stream in (False, True)]
    assert [r.status_code for r in answers] == [404] * 4
    assert len({r.text for r in answers}) == 1
    assert answers[0].json()["error"] == "unknown_query"


async def test_follows_that_is_not_a_query_id_is_refused_by_the_schema(client, signing_key):
    response = await client.post("/v1/ask", headers=bearer(employee_jwt(
        signing_key, ["all-employees"])), json={"question": "それは？", "follows": "../etc"})
    assert response.status_code == 400


async def test_a_passage_of_a_group_the_caller_lost_is_neither_used_nor_named(
        client, signing_key):
    # 給与規程 is hr's: the employee cited it while in hr, and has left hr since.
    first = await ask(client, employee_jwt(signing_key, ["all-employees", "hr"]),
                      "時間外勤務の割増賃金率はいくらですか")
    assert any(c["path"].endswith("hr/給与規程.md") for c in first["citations"])
    later = employee_jwt(signing_key, ["all-employees"])
    follow_up = await ask(client, later, "それは休日出勤でも同じですか", first["query_id"])
    assert all("hr/" not in c["path"] for c in follow_up["citations"])
    assert "給与規程" not in follow_up["asked_as"]
    assert "給与規程" not in follow_up["answer"]


async def test_the_same_words_in_two_conversations_are_not_one_cached_answer(
        client, signing_key, sample_index_url):
    token = employee_jwt(signing_key, ["all-employees"])
    leave = await ask(client, token, LEAVE)
    warranty = await ask(client, token, "製品保証規定の保証期間は何か月ですか")
    words = "それは延長できますか"
    after_leave = await ask(client, token, words, leave["query_id"])
    after_warranty = await ask(client, token, words, warranty["query_id"])
    assert after_leave["asked_as"] != after_warranty["asked_as"]
    assert after_leave["query_id"] != after_warranty["query_id"]
    assert not logged_as_cached(sample_index_url, after_warranty["query_id"])


def logged_as_cached(url: str, query_id: str) -> bool:
    with connect(url) as conn:
        return conn.execute("SELECT cached FROM query_log WHERE id = %s",
                            (query_id,)).fetchone()[0]


async def test_a_follow_up_is_cached_as_the_question_it_was_searched_as(
        client, signing_key, sample_index_url):
    token = employee_jwt(signing_key, ["all-employees"])
    first = await ask(client, token, LEAVE)
    once = await ask(client, token, "じゃあ、半日単位でも取れますか", first["query_id"])
    again = await ask(client, token, "じゃあ、半日単位でも取れますか", first["query_id"])
    assert logged_as_cached(sample_index_url, again["query_id"])
    assert (again["answer"], again["asked_as"]) == (once["answer"], once["asked_as"])
    # Another conversation on the same topic reads the same words the same way: one answer.
    other = await ask(client, token, LEAVE)
    elsewhere = await ask(client, token, "じゃあ、半日単位でも取れますか", other["query_id"])
    assert logged_as_cached(sample_index_url, elsewhere["query_id"])
    assert elsewhere["answer"] == once["answer"]


async def test_a_follow_up_asking_of_two_things_is_answered_part_by_part(client, signing_key):
    token = employee_jwt(signing_key, ["all-employees"])
    first = await ask(client, token, "育児休業の申出は何日前までに必要ですか")
    both = "育児休業と介護休業だと？"
    answer = await ask(client, token, both, first["query_id"])
    assert answer["asked_as"] == "育児休業と介護休業の申出は何日前までに必要ですか"
    assert [p["label"] for p in answer["parts"]] == ["育児休業", "介護休業"]
    assert "2週間前" in answer["answer"]
    events = await streamed_events(client, both, token, "deep", first["query_id"])
    plan = next(data for name, data in events if name == "stage" and data["stage"] == "plan")
    assert [p["label"] for p in plan["parts"]] == ["育児休業", "介護休業"]
    assert [d for n, d in events if n == "stage" and d["stage"] == "part"]
    done = events[-1][1]
    assert done["asked_as"] == answer["asked_as"] and len(done["parts"]) == 2
