"""A small indexed corpus and the real query service over it, for the tests of the employee
page, its sign-in and the documents endpoint (the hashing stand-in embedder: these tests do not
measure retrieval quality)."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import psycopg
import uvicorn
from litestar import Litestar
from litestar.testing import AsyncTestClient

from kb_cli.serve import server_config
from kb_core.api_tokens import TokenStore
from kb_core.callers import Caller
from kb_core.settings import ServiceSettings, Settings
from kb_pipeline.in_process import ingest_paths
from query_service.app import create_app

__all__ = ["CORPUS", "HOLIDAY_QUESTION", "ask", "bearer_headers", "document_id", "free_port",
           "index_corpus", "served", "web_app"]

CORPUS = {
    "all/休暇規程.md": (
        "# 休暇規程\n\n"
        "## 第1条（目的）\nこの規程は、社員の休暇について定める。\n\n"
        "## 第2条（年次有給休暇の申請）\n"
        "年次有給休暇は、入社6か月後から取得できる。"
        "年次有給休暇は、取得日の3営業日前までに所属長へ申請する。"
        "承認された休暇は勤怠システムに記録される。\n\n"
        "## 第3条（特別休暇）\n結婚したときは5日の特別休暇を与える。\n\n"
        "## 第4条（慶弔休暇）\n親族が亡くなったときは3日の慶弔休暇を与える。\n\n"
        "## 第5条（改廃）\nこの規程の改廃は人事部が行う。\n"),
    "all/案内.html": "<html><body><h1>社内案内</h1><p>社員食堂は11時から14時まで営業する。</p>"
                     "<script>alert(1)</script></body></html>",
    "hr/給与規程.md": "# 給与規程\n\n## 第10条（支給日）\n給与支給日は毎月25日とする。\n",
}
HOLIDAY_QUESTION = "年次有給休暇は何営業日前までに申請しますか"


def index_corpus(root: Path, settings: Settings, instance: dg.DagsterInstance) -> Path:
    """CORPUS written under `root` (all/ for all-employees, hr/ for hr) and ingested."""
    for rel, text in CORPUS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    (root / "all" / "_access.toml").write_text('groups = ["all-employees"]\n')
    (root / "hr" / "_access.toml").write_text('groups = ["hr"]\n')
    summary = ingest_paths([root], None, settings, instance)
    assert summary.ingested == len(CORPUS), summary
    return root


def document_id(conn: psycopg.Connection, name: str) -> int:
    return conn.execute("SELECT id FROM documents WHERE path LIKE %s",
                        (f"%{name}",)).fetchone()[0]


def bearer_headers(conn: psycopg.Connection,
                   callers: dict[str, list[str]]) -> dict[str, dict[str, str]]:
    """An API token for each caller (its name → its groups), as the header that carries it."""
    return {name: {"Authorization": f"Bearer {TokenStore.create(conn, name, groups)}"}
            for name, groups in callers.items()}


async def ask(client: AsyncTestClient, headers: dict[str, str], question: str,
              follows: str | None = None) -> dict:
    """The answer `POST /v1/ask` gives the caller of `headers` (following the answer
    `follows`), which must succeed."""
    body = {"question": question} | ({"follows": follows} if follows else {})
    response = await client.post("/v1/ask", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def web_app(settings: Settings, dev_user: Caller | None = None, **service: object) -> Litestar:
    """The real app over `settings`' database, no rate limit, the service settings given."""
    service = {"rate_limit_per_minute": 0} | service
    return create_app(dataclasses.replace(
        settings, service=dataclasses.replace(settings.service, **service)), dev_user)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(app: Litestar, port: int,
           trusted_proxies: tuple[str, ...] = ServiceSettings.trusted_proxies) -> Iterator[str]:
    """`app` served as `kb serve` serves it, on 127.0.0.1:`port` in a thread, for tests that
    need a real server (the test client runs one request at a time); yields its URL."""
    server = uvicorn.Server(server_config(app, "127.0.0.1", port, trusted_proxies))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the service did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
