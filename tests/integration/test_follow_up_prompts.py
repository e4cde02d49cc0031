"""Follow-ups with an LLM answerer, over HTTP: the model rewrites the question from the
conversation (the rewrite kept only when its words come from what the model was shown) and
reads the earlier turns beside the passages; and whatever groups a caller has lost between two
turns, nothing of a passage it can no longer read reaches the model's prompts, the citations or
the answer. The real service on a port, the real anthropic SDK against a model on 127.0.0.1,
the samples indexed by the real embedder; employees sign in with JWTs whose groups change
between turns."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kb_core.database import connect
from kb_search.answerers.prompt import REWRITE_PROMPT
from tests.fake_servers import FakeServer, fake_server
from tests.integration.test_llm_table_answers import message
from tests.integration.test_service import bearer, employee_jwt, make_client
from tests.web_app import free_port, served

LEAVE = "年次有給休暇は何日前までに申請が必要ですか"
GROUPS = ["all-employees", "hr", "managers", "engineering", "qa", "executives"]
# First questions whose answers cite documents of different groups (docs: samples/docs).
FIRST = {
    LEAVE: "all-employees",
    "時間外勤務の割増賃金率はいくらですか": "hr",
    "人事評価の調整会議で決まったことは？": "hr",
    "ZENITH2028の売上目標はいくらですか": "executives",
    "KP-2041-03の工程で検査するのは何ですか": "engineering",
}
FOLLOW_UPS = ["それは誰に出すの？", "じゃあ、半日単位でも取れますか", "その例外はありますか"]


def blocks(user: str, tag: str) -> list[str]:
    """The unescaped contents of the prompt's <tag> blocks."""
    return [html.unescape(b) for b in re.findall(rf"<{tag}[^>]*>\n?(.*?)\n?</{tag}>", user,
                                                 re.S)]


def model(body: dict) -> tuple[int, dict]:
    """A model that rewrites a follow-up as the conversation's first question followed by the
    follow-up (words it was shown), and answers with the start of the first document."""
    user = body["messages"][-1]["content"]
    if not isinstance(user, str):  # a tool's result: not asked of this model
        return message([{"type": "text", "text": "該当する記載が見つかりませんでした。"}],
                       "end_turn")
    if body["system"] == REWRITE_PROMPT:
        questions = blocks(user, "question")
        return message([{"type": "text", "text": f"{questions[0]}、{questions[-1]}"}],
                       "end_turn")
    documents = blocks(user, "document")
    text = (f"{documents[0][:40]}[1]" if documents else "該当する記載が見つかりませんでした。")
    return message([{"type": "text", "text": text}], "end_turn")


@pytest.fixture(scope="module")
def service(sample_index_url, jwks) -> Iterator[tuple[httpx.Client, FakeServer]]:
    """The service with Claude as its answerer, on a port; and the fake Claude."""
    with (pytest.MonkeyPatch.context() as env, fake_server({"/v1/messages": model}) as fake):
        env.setenv("ANTHROPIC_BASE_URL", fake.url)
        env.setenv("ANTHROPIC_API_KEY", "test-key")
        app = make_client(sample_index_url, jwks, llm="claude").app
        with served(app, free_port()) as url, httpx.Client(base_url=url, timeout=120) as http:
            yield http, fake


def ask(http: httpx.Client, token: str, question: str, follows: str | None = None) -> dict:
    body = {"question": question} | ({"follows": follows} if follows else {})
    response = http.post("/v1/ask", json=body, headers=bearer(token))
    assert response.status_code == 200, response.text
    return response.json()


def prompts_since(fake: FakeServer, start: int) -> list[str]:
    """What the model was sent since request `start`: system prompts and messages, unescaped."""
    return [html.unescape(json.dumps(body, ensure_ascii=False))
            for _, body in fake.requests[start:]]


def test_the_model_rewrites_a_follow_up_and_reads_the_earlier_turns(service, signing_key):
    http, fake = service
    token = employee_jwt(signing_key, ["all-employees"])
    first = ask(http, token, LEAVE)
    start = len(fake.requests)
    follow_up = ask(http, token, "じゃあ、半日単位でも取れますか", first["query_id"])
    assert follow_up["asked_as"] == f"{LEAVE}、じゃあ、半日単位でも取れますか"
    rewrite, answer = fake.requests[start][1], fake.requests[-1][1]
    assert rewrite["system"] == REWRITE_PROMPT
    conversation = blocks(answer["messages"][0]["content"], "conversation")
    assert blocks(conversation[0], "question") == [LEAVE]
    assert blocks(conversation[0], "answer") == [first["answer"]]
    assert "<question>じゃあ、半日単位でも取れますか" not in answer["messages"][0]["content"]


def test_a_rewrite_bringing_words_nobody_said_is_not_searched(service, signing_key):
    http, fake = service
    token = employee_jwt(signing_key, ["all-employees"])
    first = ask(http, token, LEAVE)
    original = fake.routes["/v1/messages"]

    def inventing(body: dict) -> tuple[int, dict]:
        if body["system"] == REWRITE_PROMPT:
            return message([{"type": "text", "text": "退職金の支給日はいつですか"}], "end_turn")
        return original(body)

    fake.routes["/v1/messages"] = inventing
    try:
        follow_up = ask(http, token, "じゃあ、半日単位でも取れますか", first["query_id"])
    finally:
        fake.routes["/v1/messages"] = original
    assert "退職金" not in follow_up["asked_as"]  # read offline instead
    assert follow_up["asked_as"].endswith("半日単位でも取れますか")


def readable(url: str, chunk_ids: list[int], groups: list[str]) -> dict[int, bool]:
    with connect(url) as conn:
        return dict(conn.execute(
            "SELECT id, allowed_groups && %s::text[] FROM chunks WHERE id = ANY(%s)",
            (groups, chunk_ids)).fetchall())


@hypothesis_settings(max_examples=10, deadline=None, derandomize=True)
# The case the property is about, whatever the draw: hr's 給与規程 cited, then hr lost.
@example(first="時間外勤務の割増賃金率はいくらですか", follow_up="その例外はありますか",
         before={"hr"}, after={"all-employees"})
@given(first=st.sampled_from(sorted(FIRST)), follow_up=st.sampled_from(FOLLOW_UPS),
       before=st.sets(st.sampled_from(GROUPS)),
       after=st.sets(st.sampled_from(GROUPS), min_size=1))
def test_nothing_of_a_group_the_caller_lost_reaches_the_model_or_the_answer(
        service, signing_key, sample_index_url, first, follow_up, before, after):
    http, fake = service
    before = sorted({FIRST[first], *before})
    earlier = ask(http, employee_jwt(signing_key, before), first)
    start = len(fake.requests)
    later = ask(http, employee_jwt(signing_key, sorted(after)), follow_up, earlier["query_id"])
    cited = {c["chunk_id"]: c for c in earlier["citations"]}
    may_read = readable(sample_index_url, list(cited), sorted(after))
    lost = [c for chunk, c in cited.items() if not may_read.get(chunk, False)]
    prompts = prompts_since(fake, start)
    for citation in lost:
        for prompt in prompts:
            assert citation["path"] not in prompt
            assert citation["quote"] not in prompt
    if lost:  # its answer may say what the lost passage says: only its question is shown
        assert not any("<answer>" in p for p in prompts)
    now = readable(sample_index_url, [c["chunk_id"] for c in later["citations"]],
                   sorted(after))
    assert all(now.values()) and len(now) == len(later["citations"])
    lost_paths = {c["path"] for c in lost}
    assert not lost_paths & {c["path"] for c in later["citations"]}
    assert all(c["quote"] not in later["answer"] for c in lost)
