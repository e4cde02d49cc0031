"""The query service's Litestar app. For now: health and readiness; search and answers come
with the retrieval and service issues."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
from litestar import Litestar, get
from litestar.datastructures import State
from litestar.openapi import OpenAPIConfig
from litestar.response import Response
from litestar.status_codes import HTTP_200_OK, HTTP_503_SERVICE_UNAVAILABLE
from psycopg_pool import AsyncConnectionPool

from kb_core.embeddings import make_embedder
from kb_core.index_model import IndexModelMismatchError, check_index_model_async

__all__ = ["create_app"]


class Health(msgspec.Struct):
    status: str


class Readiness(msgspec.Struct):
    ready: bool
    database: bool
    embedder: str | None
    index_model: str
    detail: str | None = None


@get("/healthz", operation_id="healthz", tags=["health"])
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


@get("/readyz", operation_id="readyz", tags=["health"])
async def readyz(state: State) -> Response[Readiness]:
    """Ready when the database answers, the embedder is loaded and matches the index."""
    embedder = state.embedder
    try:
        async with state.pool.connection(timeout=2) as conn:
            await check_index_model_async(conn, embedder)
    except IndexModelMismatchError as exc:
        body = Readiness(False, True, embedder.name, "mismatch", str(exc))
        return Response(body, status_code=HTTP_503_SERVICE_UNAVAILABLE)
    except Exception as exc:  # any database failure means not ready; the reason is reported
        body = Readiness(False, False, embedder.name, "unknown", f"database: {exc}")
        return Response(body, status_code=HTTP_503_SERVICE_UNAVAILABLE)
    return Response(Readiness(True, True, embedder.name, "ok"), status_code=HTTP_200_OK)


def create_app(database_url: str, embedder_name: str) -> Litestar:
    """The app, with its pool opened in the lifespan and closed in `finally`."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        pool = AsyncConnectionPool(database_url, min_size=1, max_size=8, open=False,
                                   check=AsyncConnectionPool.check_connection)
        await pool.open(wait=False)
        app.state.pool = pool
        app.state.embedder = make_embedder(embedder_name)
        try:
            yield
        finally:
            await pool.close()

    return Litestar(
        route_handlers=[healthz, readyz],
        lifespan=[lifespan],
        openapi_config=OpenAPIConfig(
            # No docs UI: the bundled ones load JavaScript from a CDN (DESIGN.md).
            title="社内ナレッジ検索", version="0.1.0", path="/schema", render_plugins=[]
        ),
    )
