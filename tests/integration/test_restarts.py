"""PostgreSQL restarts under the running service: `kb serve` (a real subprocess) on an embedded
PostgreSQL of its own is kept under light load while the server is stopped and started again.
During the outage every request gets 503 with the JSON error, `/readyz` says not ready, and
afterwards the service recovers by itself within seconds. `/readyz` is sampled continuously and
must tell the truth throughout."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from kb_core.api_tokens import TokenStore
from kb_core.database import connect
from kb_core.database_server import start_embedded, stop_embedded
from kb_core.migrations import migrate
from kb_core.settings import REPO_ROOT, EmbedderSettings, Settings
from tests.integration.test_soak import KB, ingest, running_service

pytestmark = pytest.mark.slow

DOCS = {
    "就業規則.md": "# 就業規則\n\n## 第22条（副業）\n副業は届出制とし、開始の30日前までに"
                   "届け出る。",
    "休暇.md": "# 休暇規程\n\n年次有給休暇は取得日の3営業日前までに申請する。",
    "寮.md": "# 福利厚生\n\n独身寮の入居資格は入社3年目までとする。",
}
QUESTIONS = ["有給休暇は何日前までに申請しますか", "副業の届出はいつまで？", "独身寮に入れるのは？"]
RECOVERY_S = 5.0  # the service must be answering again this long after PostgreSQL is back


@dataclass
class Sample:
    """One response (or its absence) and the interval its request was in flight."""

    path: str
    sent: float
    received: float
    status: int | None  # None: no response at all
    body: dict | None


@pytest.fixture
def own_postgres(tmp_path: Path):
    """An embedded PostgreSQL of this test alone, under a short /tmp path (the Unix socket
    lives in the data directory and its path is limited to 108 bytes)."""
    home = Path("/tmp") / f"kbr-{uuid.uuid4().hex[:8]}"
    home.mkdir()
    settings = Settings(home=home, database_url=None, dagster_database_url=None, docs_dirs=(),
                        embedder=EmbedderSettings("hashing"), max_file_bytes=50 * 2**20)
    try:
        url = start_embedded(settings)
        migrate(url)
        yield settings, url
    finally:
        stop_embedded(settings)
        shutil.rmtree(home, ignore_errors=True)


def restart_postgres(settings: Settings) -> None:
    """`kb db start` in its own process, the way an operator brings the server back."""
    env = {k: v for k, v in os.environ.items() if k != "KB_DATABASE_URL"}
    env["KB_HOME"] = str(settings.home)
    subprocess.run([KB, "db", "start", "--json"], cwd=REPO_ROOT, env=env,
                   check=True, capture_output=True, timeout=120)


async def sample_while(base_url: str, token: str, samples: list[Sample],
                       stop: asyncio.Event) -> None:
    """Light load (three clients asking and searching) and /readyz every 100 ms, until `stop`."""

    async def call(client: httpx.AsyncClient, path: str, body: dict | None) -> None:
        sent = time.monotonic()
        try:
            response = (await client.post(path, json=body) if body is not None
                        else await client.get(path))
            status, payload = response.status_code, response.json()
        except (httpx.HTTPError, ValueError):
            status, payload = None, None
        samples.append(Sample(path, sent, time.monotonic(), status, payload))

    async def user(client: httpx.AsyncClient, n: int) -> None:
        while not stop.is_set():
            question = QUESTIONS[n % len(QUESTIONS)]
            path, body = (("/v1/search", {"query": question}) if n % 2
                          else ("/v1/ask", {"question": question}))
            await call(client, path, body)
            n += 1
            await asyncio.sleep(0.1)

    async def readiness(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            await call(client, "/readyz", None)
            await asyncio.sleep(0.1)

    async with httpx.AsyncClient(base_url=base_url, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        await asyncio.gather(readiness(client), *(user(client, n) for n in range(3)))


async def outage(base_url: str, token: str, settings: Settings,
                 outage_s: float) -> tuple[list[Sample], dict[str, float]]:
    """Samples over: 3 s up, PostgreSQL stopped for `outage_s`, started again, then until
    /readyz has said ready for 3 s (at most RECOVERY_S + 3 s)."""
    samples: list[Sample] = []
    stop = asyncio.Event()
    load = asyncio.create_task(sample_while(base_url, token, samples, stop))
    marks: dict[str, float] = {}
    await asyncio.sleep(3)
    marks["stopping"] = time.monotonic()
    await asyncio.to_thread(stop_embedded, settings)
    marks["stopped"] = time.monotonic()
    await asyncio.sleep(outage_s)
    marks["starting"] = time.monotonic()
    await asyncio.to_thread(restart_postgres, settings)
    marks["started"] = time.monotonic()
    deadline = marks["started"] + RECOVERY_S
    while time.monotonic() < deadline and "ready" not in marks:
        ready = [s for s in samples if s.path == "/readyz" and s.sent > marks["started"]
                 and s.status == 200]
        if ready:
            marks["ready"] = ready[0].received
        await asyncio.sleep(0.1)
    await asyncio.sleep(3)
    stop.set()
    await load
    return samples, marks


def test_postgres_restart_gives_503_then_recovers_and_readyz_tells_the_truth(
    own_postgres, tmp_path
):
    settings, url = own_postgres
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text, encoding="utf-8")
    (docs / "_access.toml").write_text('groups = ["all-employees"]\n', encoding="utf-8")
    ingest(url, docs)
    with connect(url, autocommit=True) as conn:
        token = TokenStore.create(conn, "app", ["all-employees"])

    with running_service(url, tmp_path) as server:
        samples, marks = asyncio.run(outage(server.base_url, token, settings, outage_s=20))
        assert server.process.poll() is None, "the service died with its database"
        log = server.log()

    def during(start: float, end: float) -> list[Sample]:
        return [s for s in samples if s.sent >= start and s.received <= end]

    before = during(0, marks["stopping"])
    down = during(marks["stopped"], marks["starting"])
    assert "ready" in marks, f"/readyz not ready {RECOVERY_S} s after the restart\n{log[-3000:]}"
    after = [s for s in samples if s.sent >= marks["ready"]]
    t0 = marks["stopped"]
    timeline = "\n".join(f"{s.path} {s.sent - t0:.2f}..{s.received - t0:.2f} {s.status}"
                         for s in samples if s.status != 200)
    describe = (f"marks {({k: round(v - t0, 2) for k, v in marks.items()})}\n"
                f"non-200 responses:\n{timeline}\n{log[-2000:]}")

    # Up: everything answers.
    assert before and all(s.status == 200 for s in before), describe
    # Down: every answer is the JSON 503; /readyz says not ready, naming the database.
    requests_down = [s for s in down if s.path != "/readyz"]
    ready_down = [s for s in down if s.path == "/readyz"]
    assert len(requests_down) >= 3 and len(ready_down) >= 3, (len(requests_down), describe)
    for s in requests_down:
        assert s.status == 503 and s.body["error"] == "database_unavailable", (s, describe)
        assert s.body["detail"]
    for s in ready_down:
        assert s.status == 503 and s.body["ready"] is False and s.body["database"] is False, s
    # At no time a 5xx other than the JSON 503, nor a dropped connection.
    for s in samples:
        assert s.status in (200, 503) and s.body is not None, (s, describe)
        if s.status == 503 and s.path != "/readyz":
            assert s.body["error"] == "database_unavailable", s
    # Back: readiness within seconds, and from then on everything answers again.
    assert marks["ready"] - marks["started"] < RECOVERY_S, describe
    assert len(after) >= 10, describe
    late = [s for s in after if s.status != 200]
    assert not late, (late, describe)
    # /readyz never claimed ready while the server was down (requests sent after the stop had
    # finished and answered before the start began).
    assert not [s for s in ready_down if s.status == 200]
