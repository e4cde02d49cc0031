"""Searches on a streaming replica, fenced: the session's embedded server is the primary, and a
second server made from it with `pg_basebackup -R` (bench/standby.py) is a hot standby on
127.0.0.1. A replica answers only once it has replayed the primary's latest index change;
a replica behind, cancelled by a recovery conflict or stopped hands the search to the primary,
and the caller never sees a 5xx. The real Litestar app, real Dagster runs of the folder
sensor, the deterministic `hashing` embedder."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import AsyncIterator

import psycopg
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from kb_core.generations import (
    create_generation,
    live_generation,
    publish_generation,
    record_evaluation,
    use_generation,
)
from kb_core.queries import query
from kb_core.read_routing import ReadRouter
from kb_core.settings import DEFAULT_SYNONYMS, EmbedderSettings, ServiceSettings
from kb_search.search import Searcher
from kb_search.synonyms import Synonyms
from query_service.app import create_app
from tests.conftest import wal_position
from tests.integration.test_access_revocation import (  # noqa: F401 - fixtures
    QUESTION,
    folder,
    hr_paths,
    reached,
    tokens,
)
from tests.integration.test_hostile_files import evaluate, tick

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

GROUPS_OF = {"manager": ["managers"], "hr": ["hr"], "staff": ["all-employees"]}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def indexed(folder, instance) -> tuple:  # noqa: F811 - the fixture imported above
    """The watched folder of test_access_revocation, ingested by one sensor tick and its runs."""
    root, settings = folder
    tick(settings, instance)
    return root, settings


@pytest.fixture
async def app(indexed, replica_url) -> AsyncIterator[Litestar]:
    _, settings = indexed
    app = create_app(dataclasses.replace(
        settings, database_read_urls=(replica_url,),
        service=ServiceSettings(rate_limit_per_minute=0)))
    yield app


@pytest.fixture
async def client(app) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=app) as c:
        yield c


async def learned(reads: ReadRouter, before: int | None = None) -> None:
    """Wait until the service knows its fence and, given the fence `before` a change, has
    learned of that change (from the notice its commit sent, within milliseconds)."""
    deadline = time.monotonic() + 5
    while (position := reads.fence.position) is None or (
            before is not None and position <= before):
        assert time.monotonic() < deadline, "the service did not learn the index change"
        await asyncio.sleep(0.01)


def visible(conn: psycopg.Connection, groups: list[str]) -> set[str]:
    """The paths of the live documents the primary lets `groups` read."""
    return {path for (path,) in conn.execute(
        "SELECT path FROM documents WHERE allowed_groups && %s::text[]", (groups,))}


async def served_by_replica(client: AsyncTestClient, reads: ReadRouter,
                            headers: dict[str, str]) -> bool:
    before = reads.replicas[0].served
    response = await client.post("/v1/search", json={"query": QUESTION}, headers=headers)
    assert response.status_code == 200, response.text
    return reads.replicas[0].served > before


def publish_copy_without(conn: psycopg.Connection, left_out: str) -> None:
    """Publish a new generation holding the live one's documents but `left_out` (as if its
    rebuild no longer read that file), built and published as `kb generation` does."""
    version = live_generation(conn).pipeline_version
    gen = create_generation(conn, version)
    use_generation(conn, gen.id)
    conn.execute("INSERT INTO documents SELECT * FROM public.documents WHERE path <> %s",
                 (left_out,))
    conn.execute("INSERT INTO chunks SELECT c.* FROM public.chunks c "
                 "JOIN documents d ON d.id = c.document_id")
    conn.execute("INSERT INTO chunk_vectors SELECT v.* FROM public.chunk_vectors v "
                 "JOIN chunks c ON c.id = v.chunk_id")
    # Its keyword statistics follow its chunks (sql/024_statistics_per_group_set.sql).
    conn.execute("INSERT INTO index_settings SELECT * FROM public.index_settings")
    use_generation(conn, None)
    record_evaluation(conn, gen.id, True, {}, None)
    publish_generation(conn, gen.id, version, lambda uri: ([], None))


async def test_a_replica_that_has_replayed_the_latest_change_serves_searches_and_asks(
    app, client, conn, standby, tokens  # noqa: F811
):
    reads = app.state.knowledge_base.questions._reads  # the router, to see who served
    await learned(reads)
    standby.catch_up()
    replica = reads.replicas[0]
    before = replica.served
    paths = await reached(client, tokens["manager"])
    # A search, two asks (each reads the index version, the first also retrieves), a stream.
    assert replica.served - before >= 5 and replica.behind == replica.failures == 0
    assert paths and paths - {"(the answer quotes hr/給与規程.md)"} <= visible(conn, ["managers"])
    # Identity (the token) and the query log were the primary's: the asks are logged there.
    assert conn.execute("SELECT count(*) FROM query_log").fetchone()[0] == 3


async def test_a_replica_whose_replay_is_paused_never_answers_what_the_primary_would_not(
    app, client, conn, standby, tokens, indexed, instance  # noqa: F811
):
    root, settings = indexed
    reads = app.state.knowledge_base.questions._reads  # the router, to see who served
    await learned(reads)
    standby.catch_up()
    assert await served_by_replica(client, reads, tokens["manager"])
    assert hr_paths(await reached(client, tokens["manager"])) >= {
        "company/hr/給与規程.md", "company/hr/賞与規程.md"}

    standby.pause_replay()
    try:
        # Revoke a group: managers lose hr/ on the primary; the paused replica still grants it.
        before = reads.fence.position
        (root / "hr" / "_access.toml").write_text('groups = ["hr"]\n', encoding="utf-8")
        evaluate(settings, instance)
        await learned(reads, before)
        for name, headers in tokens.items():
            assert await reached(client, headers) - {"(the answer quotes hr/給与規程.md)"} <= (
                visible(conn, GROUPS_OF[name])), name
            assert not await served_by_replica(client, reads, headers)
        assert hr_paths(await reached(client, tokens["manager"])) == set()

        # Publish a generation without 社内報: the primary no longer has it; the replica does.
        before = reads.fence.position
        publish_copy_without(conn, "company/社内報.md")
        await learned(reads, before)
        for name, headers in tokens.items():
            paths = await reached(client, headers)
            assert "company/社内報.md" not in paths, name
            assert paths - {"(the answer quotes hr/給与規程.md)"} <= visible(
                conn, GROUPS_OF[name]), name
        with psycopg.connect(standby.url(conn.info.dbname)) as paused:
            assert paused.execute("SELECT count(*) FROM documents "
                                  "WHERE path = 'company/社内報.md'").fetchone()[0] == 1
    finally:
        standby.resume_replay()

    standby.catch_up()
    assert await served_by_replica(client, reads, tokens["staff"])
    assert "company/社内報.md" not in await reached(client, tokens["staff"])
    assert hr_paths(await reached(client, tokens["manager"])) == set()


def test_a_search_a_replica_cancels_for_a_recovery_conflict_is_answered_by_the_primary(
    reads, conn, standby
):
    """A lock the primary takes is replayed on the standby, which cancels the query in its
    way (after max_standby_streaming_delay); the router then runs the read on the primary."""
    reads.fence.advance(wal_position(conn))
    standby.catch_up()
    calls: list[str] = []

    def read(c: psycopg.Connection) -> int:
        calls.append(c.info.host)
        if len(calls) == 1:  # on the replica: hold the table while the primary locks it
            threading.Timer(0.3, lock_on_primary).start()
            c.execute("SELECT count(*) FROM index_state, pg_sleep(10)")
        return c.execute(query("index_version")).fetchone()[0]

    def lock_on_primary() -> None:
        with conn.transaction():
            conn.execute("LOCK TABLE index_state IN ACCESS EXCLUSIVE MODE")

    started = time.monotonic()
    assert reads.run(read) == 0
    assert time.monotonic() - started < 5
    assert calls[0] == "127.0.0.1" and calls[1] != "127.0.0.1"  # the replica, then the primary
    assert reads.replicas[0].conflicts == 1 and reads.replicas[0].failures == 0


def test_a_paired_read_gets_a_second_connection_to_its_server_only_when_one_is_idle(
    reads, conn, standby
):
    """A search's legs run at once on two connections of one server; on a busy pool, one after
    the other on one, without waiting for a second."""
    def servers(c: psycopg.Connection, spare: psycopg.Connection | None) -> tuple:
        return c.info.host, spare and spare.info.host, spare and spare.info.backend_pid

    for pool in (reads.primary, reads.replicas[0].pool):
        pool.wait()  # both its connections made
    host, spare_host, spare_pid = reads.run_paired(servers)  # no fence yet: the primary
    assert spare_host == host != "127.0.0.1" and spare_pid is not None
    with reads.primary.connection():  # of its two connections, one is left for the read
        assert reads.run_paired(servers)[1:] == (None, None)
    reads.fence.advance(wal_position(conn))
    standby.catch_up()
    assert reads.run_paired(servers)[:2] == ("127.0.0.1", "127.0.0.1")  # the replica's
    assert reads.replicas[0].served == 1


def test_searches_on_the_replica_path_find_what_the_primary_finds(
    indexed, reads, conn, standby
):
    """The same hybrid query on both servers, once the replica has replayed the index."""
    searcher = Searcher(EmbedderSettings("hashing"), Synonyms(DEFAULT_SYNONYMS))
    reads.fence.advance(wal_position(conn))
    standby.catch_up()
    prepared = searcher.prepare("給与の支給日")
    on_replica, _ = reads.run(lambda c: searcher.search(c, prepared, ["all-employees"], 10))
    assert reads.replicas[0].served == 1
    with reads.primary.connection() as c:
        on_primary, _ = searcher.search(c, prepared, ["all-employees"], 10)
    assert [h.chunk_id for h in on_replica.hits] == [h.chunk_id for h in on_primary.hits]


async def test_stopping_the_replica_under_load_gives_no_5xx_and_readyz_stays_200(
    app, client, conn, standby, tokens  # noqa: F811
):
    reads = app.state.knowledge_base.questions._reads  # the router, to see who served
    await learned(reads)
    standby.catch_up()
    statuses: list[tuple[str, int]] = []
    stop = asyncio.Event()

    async def load(headers: dict[str, str]) -> None:
        while not stop.is_set():
            for path, body in (("/v1/search", {"query": QUESTION}),
                               ("/v1/ask", {"question": QUESTION})):
                response = await client.post(path, json=body, headers=headers)
                statuses.append((path, response.status_code))
            # The test client can answer without ever suspending: let the test itself run.
            await asyncio.sleep(0)

    clients = [asyncio.create_task(load(h)) for h in tokens.values()]
    try:
        await asyncio.sleep(1.0)
        served = reads.replicas[0].served
        assert served > 0
        await asyncio.to_thread(standby.stop, "fast")
        await asyncio.sleep(1.5)
        ready = await client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert [r["state"] for r in ready.json()["replicas"]] == ["down"]
        await asyncio.sleep(1.0)
    finally:
        stop.set()
        await asyncio.gather(*clients)
        await asyncio.to_thread(standby.start)
    assert statuses and all(status == 200 for _, status in statuses), {
        s for s in statuses if s[1] != 200}
    assert reads.replicas[0].failures >= 1

    # Started again, it serves once it has caught up (/readyz's probe finds it answering).
    await asyncio.to_thread(standby.catch_up)
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert [r["state"] for r in ready.json()["replicas"]] == ["serving"]
    assert await served_by_replica(client, reads, tokens["staff"])


async def test_readyz_reports_a_replica_that_is_behind_and_stays_200(
    app, client, conn, standby, indexed, instance
):
    root, settings = indexed
    reads = app.state.knowledge_base.questions._reads  # the router, to see who served
    await learned(reads)
    standby.catch_up()
    assert [r["state"] for r in (await client.get("/readyz")).json()["replicas"]] == [
        "serving"]
    standby.pause_replay()
    try:
        before = reads.fence.position
        (root / "hr" / "_access.toml").write_text('groups = ["hr"]\n', encoding="utf-8")
        evaluate(settings, instance)
        await learned(reads, before)
        ready = await client.get("/readyz")
        assert ready.status_code == 200
        (replica,) = ready.json()["replicas"]
        assert replica["state"] == "behind" and replica["lag_bytes"] > 0
    finally:
        standby.resume_replay()
