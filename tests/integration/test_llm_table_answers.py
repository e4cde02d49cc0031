"""An LLM answerer computing from tables through its tools, over HTTP: the real app and
database with the samples indexed, the real anthropic SDK against a model on 127.0.0.1 that
reads the <tables> block it is given, calls a tool and answers from the result. What it states
from a tool is verified by recomputing it from the rows it cites; what it computes itself is
not; the tables it is offered are only those the caller may read."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from kb_core.api_tokens import TokenStore
from kb_core.database import connect
from tests.fake_servers import fake_server
from tests.integration.test_service import bearer, make_client, streamed_events

pytestmark = pytest.mark.anyio

COUNTED = "地域加算額が2,000円の地域は何か所ありますか"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def portal(sample_index_url) -> str:
    """A token of the all-employees group, which may read the travel allowances, not the
    engineering spec list."""
    with connect(sample_index_url, autocommit=True) as conn:
        conn.execute("DELETE FROM api_tokens WHERE name = 'table-tools'")
        return TokenStore.create(conn, "table-tools", ["all-employees"])


def user_message(body: dict) -> str:
    return body["messages"][0]["content"]


def table_with(column: str, body: dict) -> str:
    """The id of the table of the <tables> block whose columns name `column`."""
    for table_id, columns in re.findall(r'<table id="(T\d+)"[^>]*>\ncolumns: ([^\n]*)',
                                        user_message(body)):
        if column in columns:
            return table_id
    raise AssertionError(f"no table with {column} offered")


def message(content: list[dict], stop: str) -> tuple[int, dict]:
    return 200, {"id": "msg_1", "type": "message", "role": "assistant",
                 "model": "claude-sonnet-4-5", "content": content, "stop_reason": stop,
                 "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 10}}


def counting_model() -> Callable[[dict], tuple[int, dict]]:
    """A model that counts the regions whose addition is 2,000 yen through table_count, then
    states what the tool returned, its [n] included."""
    def reply(body: dict) -> tuple[int, dict]:
        last = body["messages"][-1]["content"]
        if isinstance(last, str):
            where = [{"column": "加算額", "op": "=", "value": "2000"}]
            return message([{"type": "tool_use", "id": "toolu_1", "name": "table_count",
                             "input": {"table": table_with("加算額", body), "where": where}}],
                           "tool_use")
        result = json.loads(last[0]["content"])
        return message([{"type": "text", "text": "\n".join(result["result"])}], "end_turn")
    return reply


def saying(text: str) -> Callable[[dict], tuple[int, dict]]:
    return lambda body: message([{"type": "text", "text": text}], "end_turn")


@pytest.fixture
def claude(monkeypatch):
    """Point the anthropic SDK at a fake server with `route`; yields the server."""
    def start(route: Callable[[dict], tuple[int, dict]]):
        server = fake_server({"/v1/messages": route})
        fake = server.__enter__()
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        started.append(server)
        return fake
    started: list = []
    yield start
    for server in started:
        server.__exit__(None, None, None)


async def test_a_count_the_model_asks_a_tool_for_is_stated_cited_and_verified(
        sample_index_url, portal, claude):
    fake = claude(counting_model())
    async with make_client(sample_index_url, llm="claude") as client:
        body = (await client.post("/v1/ask", json={"question": COUNTED},
                                  headers=bearer(portal))).json()
    assert body["found"] and body["verified"], body["warnings"]
    assert body["answerer"] == "claude/claude-sonnet-4-5"
    assert body["answer"].startswith(
        "別表2 地域加算で加算額（1泊あたり）が2000のものは3件です。[1]")
    [cited] = [c for c in body["citations"] if c["cells"]]
    assert cited["path"].endswith("出張旅費規程_別表_日当宿泊費.xlsx")
    assert [c["value"] for c in cited["cells"]] == ["2,000", "2,000", "2,000"]
    first = fake.requests[0][1]
    assert [t["name"] for t in first["tools"]] == ["table_cell", "table_extreme", "table_count",
                                                   "table_compare"]
    # The spec list is engineering's: none of its tables is offered to this caller's model.
    tables = user_message(first).split("<tables>")[1]
    assert "別表2 地域加算" in tables and "最大推力" not in tables and "ZP-2041" not in tables


async def test_a_count_the_model_makes_up_without_a_tool_is_not_verified(
        sample_index_url, portal, claude):
    claude(saying("地域加算の対象地域のうち2,000円の地域は13か所です[1]。"))
    async with make_client(sample_index_url, llm="claude") as client:
        body = (await client.post("/v1/ask", json={"question": COUNTED},
                                  headers=bearer(portal))).json()
    assert body["found"] and not body["verified"]
    assert any(w.startswith("number 13 does not appear") for w in body["warnings"])


async def test_a_streamed_answer_with_tools_arrives_in_one_delta_verified(
        sample_index_url, portal, claude):
    claude(counting_model())
    async with make_client(sample_index_url, llm="claude") as client:
        events = await streamed_events(client, COUNTED, portal)
    names = [name for name, _ in events]
    assert names[-1] == "done" and names.count("delta") == 1
    done = events[-1][1]
    assert done["verified"] and "3件" in done["answer"]
    offered = {p["passage"] for p in next(d for n, d in events if n == "citations")["passages"]}
    delta = next(d for n, d in events if n == "delta")
    assert {c["passage"] for c in delta["cited"]} <= offered


async def test_a_failing_model_costs_the_tables_own_answer_not_the_answer(
        sample_index_url, portal, claude):
    fake = claude(lambda body: (500, {"type": "error", "error": {"type": "api_error",
                                                                 "message": "down"}}))
    async with make_client(sample_index_url, llm="claude") as client:
        body = (await client.post("/v1/ask", json={"question": COUNTED},
                                  headers=bearer(portal))).json()
    assert fake.requests  # the model was asked, and failed
    assert body["answerer"].startswith("table (fallback: claude/claude-sonnet-4-5 failed")
    assert body["verified"] and "3件" in body["answer"]
    assert any(c["cells"] for c in body["citations"])
