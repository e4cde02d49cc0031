"""Access over time: a group revoked in an `_access.toml` stops reaching those documents through
the running service (search hits, answers, citations, streamed citations) after one evaluation
of the folder sensor, with nothing re-parsed or re-embedded. The real Litestar app, the real
sensor, real Dagster runs and a real PostgreSQL; the deterministic `hashing` embedder."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from litestar.testing import AsyncTestClient

from kb_core.api_tokens import TokenStore
from kb_core.settings import ServiceSettings, Settings
from query_service.app import create_app
from tests.integration.test_hostile_files import evaluate, launch, tick

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

QUESTION = "給与の支給日は毎月何日ですか"
PAY_RULE = "給与の支給日は毎月25日とする。"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def folder(settings: Settings, tmp_path: Path) -> tuple[Path, Settings]:
    """A watched folder: hr/ readable by hr and managers, the rest by all employees."""
    root = tmp_path / "company"
    (root / "hr").mkdir(parents=True)
    (root / "_access.toml").write_text('groups = ["all-employees"]\n', encoding="utf-8")
    (root / "hr" / "_access.toml").write_text('groups = ["hr", "managers"]\n', encoding="utf-8")
    (root / "hr" / "給与規程.md").write_text(
        f"# 給与規程\n\n## 第1条（支給日）\n\n{PAY_RULE}\n", encoding="utf-8")
    (root / "hr" / "賞与規程.md").write_text(
        "# 賞与規程\n\n## 第1条（支給）\n\n給与とは別に賞与の支給日を定める。\n", encoding="utf-8")
    (root / "社内報.md").write_text(
        "# 社内報\n\n給与明細は毎月の支給日にポータルで確認できます。\n", encoding="utf-8")
    return root, Settings(**{**settings.__dict__, "docs_dirs": (root,)})


@pytest.fixture
def tokens(conn: psycopg.Connection) -> dict[str, dict[str, str]]:
    made = {name: TokenStore.create(conn, name, [group])
            for name, group in [("manager", "managers"), ("hr", "hr"), ("staff", "all-employees")]}
    return {name: {"Authorization": f"Bearer {token}"} for name, token in made.items()}


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AsyncTestClient]:
    unlimited = ServiceSettings(rate_limit_per_minute=0)
    app = create_app(dataclasses.replace(settings, service=unlimited))
    async with AsyncTestClient(app=app) as c:
        yield c


async def reached(client: AsyncTestClient, headers: dict[str, str]) -> set[str]:
    """Every document path that reaches this caller for QUESTION: search hits, citations of an
    answer (twice, so the second may come from the answer cache) and streamed citations."""
    paths: set[str] = set()
    search = await client.post("/v1/search", json={"query": QUESTION, "k": 50}, headers=headers)
    assert search.status_code == 200, search.text
    paths |= {hit["path"] for hit in search.json()["hits"]}
    for _ in range(2):
        ask = await client.post("/v1/ask", json={"question": QUESTION}, headers=headers)
        assert ask.status_code == 200, ask.text
        paths |= {c["path"] for c in ask.json()["citations"]}
        if PAY_RULE in ask.json()["answer"]:
            paths.add("(the answer quotes hr/給与規程.md)")
    async with client.stream("POST", "/v1/ask", json={"question": QUESTION, "stream": True},
                             headers=headers) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data = json.loads(line.split(":", 1)[1])
                for citation in data.get("citations", []) if isinstance(data, dict) else []:
                    paths.add(citation["path"])
    return paths


def hr_paths(paths: set[str]) -> set[str]:
    return {p for p in paths if "hr/" in p}


def index_snapshot(conn: psycopg.Connection) -> tuple[list, list, list]:
    """What re-parsing or re-embedding would change: chunk ids, texts and vectors, the
    embedding cache, and when each document was last ingested."""
    return (
        conn.execute("SELECT c.id, c.search_text, v.view_index, v.embedding::text "
                     "FROM chunks c JOIN chunk_vectors v ON v.chunk_id = c.id "
                     "ORDER BY c.id, v.view_index").fetchall(),
        conn.execute("SELECT model, text_sha256, created_at FROM embedding_cache "
                     "ORDER BY text_sha256").fetchall(),
        conn.execute("SELECT path, checksum, ingested_at FROM documents ORDER BY path").fetchall(),
    )


async def test_revoked_group_loses_hits_answers_and_citations_within_one_tick(
    folder, instance, conn, tokens, client
):
    root, settings = folder
    tick(settings, instance)
    assert hr_paths(await reached(client, tokens["manager"])) >= {
        "company/hr/給与規程.md", "company/hr/賞与規程.md"}  # managers see hr documents before
    before = index_snapshot(conn)

    (root / "hr" / "_access.toml").write_text('groups = ["hr"]\n', encoding="utf-8")
    result = evaluate(settings, instance)  # one sensor tick; its runs are not even executed

    assert not result.run_requests  # nothing to parse or embed: no run at all
    assert hr_paths(await reached(client, tokens["manager"])) == set()
    assert "company/hr/給与規程.md" in await reached(client, tokens["hr"])  # hr still does
    assert "company/社内報.md" in await reached(client, tokens["staff"])
    assert index_snapshot(conn) == before  # not one chunk, vector or document re-ingested
    groups = dict(conn.execute("SELECT path, allowed_groups FROM documents"))
    assert groups["company/hr/給与規程.md"] == groups["company/hr/賞与規程.md"] == ["hr"]


async def test_revocation_reaches_documents_whose_new_version_is_pending_or_failing(
    folder, instance, conn, tokens, client
):
    root, settings = folder
    tick(settings, instance)
    pay, bonus = root / "hr" / "給与規程.md", root / "hr" / "賞与規程.md"
    bonus.write_bytes(b"\x00\x01 broken export")  # a bad new version: the last good one stays
    tick(settings, instance)
    assert "company/hr/賞与規程.md" in await reached(client, tokens["manager"])
    pay.write_text(f"# 給与規程\n\n## 第1条（支給日）\n\n{PAY_RULE}改定予定。\n", encoding="utf-8")

    (root / "hr" / "_access.toml").write_text('groups = ["hr"]\n', encoding="utf-8")
    result = evaluate(settings, instance)

    # Before the run that re-ingests the edited file has even started, neither its last good
    # version nor the failing file's reaches managers any more.
    assert len(result.run_requests) == 1
    assert hr_paths(await reached(client, tokens["manager"])) == set()
    assert hr_paths(await reached(client, tokens["hr"])) >= {"company/hr/賞与規程.md"}
    launch(settings, instance, result)
    assert hr_paths(await reached(client, tokens["manager"])) == set()
    groups = dict(conn.execute("SELECT path, allowed_groups FROM documents"))
    assert groups["company/hr/給与規程.md"] == groups["company/hr/賞与規程.md"] == ["hr"]
