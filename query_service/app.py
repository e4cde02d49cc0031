"""The query service's Litestar app: configuration, the lifespan that opens and closes the
pools, health endpoints and the wiring of handlers, dependencies and error handlers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
import psycopg
from litestar import Litestar, get
from litestar.config.allowed_hosts import AllowedHostsConfig
from litestar.datastructures import State
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.response import Response
from litestar.status_codes import HTTP_200_OK, HTTP_503_SERVICE_UNAVAILABLE
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from kb_core.callers import Caller
from kb_core.embeddings import UnknownEmbedderError
from kb_core.index_model import recorded_model_async
from kb_core.read_routing import ReadRouter, Replica, ReplicaStatus, replica_name
from kb_core.settings import Settings
from kb_search.engine import build_engine
from kb_search.knowledge import KnowledgeService
from kb_search.search import pooled_search_connection
from query_service.api import BEARER, KnowledgeController
from query_service.corrections import CorrectionsController
from query_service.documents import DocumentsController
from query_service.errors import EXCEPTION_HANDLERS, DatabaseHealth, json_not_found
from query_service.fence import follow_index_changes
from query_service.identity import JwtSettings, JwtVerifier
from query_service.limits import RateLimiter
from query_service.oidc import OidcProvider, purge_sign_in_attempts
from query_service.page import page, static_files
from query_service.sessions import SessionStore
from query_service.signin import SignInController

__all__ = ["create_app"]

log = logging.getLogger(__name__)

# The development sign-in answers to these names only (with or without the port).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
ANY_HOST = "any_host"  # a route's opt key: served whatever its Host header (health probes)
POOL_TIMEOUT_S = 5.0  # the longest a request waits for a connection while the database is up
RECONNECT_TIMEOUT_S = 1.0


class Health(msgspec.Struct):
    status: str


class Readiness(msgspec.Struct):
    ready: bool
    database: bool
    embedder: str
    index_model: str
    detail: str | None = None
    replicas: list[ReplicaStatus] = []


@get("/healthz", operation_id="healthz", tags=["health"], opt={ANY_HOST: True})
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


@get("/readyz", operation_id="readyz", tags=["health"], opt={ANY_HOST: True})
async def readyz(state: State) -> Response[Readiness]:
    """Ready when the database answers and questions can be embedded with the live index's
    model (which during a rebuild with a new model is not KB_EMBEDDER's); each read replica's
    state is reported, and none is needed while the primary answers."""
    searcher = state.service.asker.searcher
    reads = state.service.reads
    replicas = await asyncio.to_thread(reads.status) if reads.replicas else []
    try:
        async with state.identity_pool.connection(timeout=2) as conn:
            model = await recorded_model_async(conn) or searcher.configured
        state.database.answered()
    except (psycopg.Error, TimeoutError, OSError) as exc:
        state.database.failed()
        body = Readiness(False, False, searcher.configured, "unknown", f"database: {exc}",
                         replicas)
        return Response(body, status_code=HTTP_503_SERVICE_UNAVAILABLE)
    try:
        embedder = searcher.embedder_for(model)
    except UnknownEmbedderError as exc:
        body = Readiness(False, True, model, "mismatch", str(exc), replicas)
        return Response(body, status_code=HTTP_503_SERVICE_UNAVAILABLE)
    body = Readiness(True, True, embedder.name, "ok", replicas=replicas)
    return Response(body, status_code=HTTP_200_OK)


async def _purge_periodically(state: State, days: int) -> None:
    """At start-up, then daily: drop query log entries past their retention (questions can
    hold personal data), ended sessions (and development ones when the development sign-in is
    off) and sign-ins that can no longer finish."""
    while True:
        try:
            purged = await asyncio.to_thread(state.service.purge_log, days)
            async with state.identity_pool.connection() as aconn:
                sessions = await state.sessions.purge(aconn)
                attempts = await purge_sign_in_attempts(aconn)
            log.info("purged %d query log entries older than %d days, %d ended sessions, "
                     "%d stale sign-ins", purged, days, sessions, attempts)
        except (psycopg.Error, TimeoutError) as exc:
            log.warning("purge failed: %s", exc)
        await asyncio.sleep(24 * 3600)


def _allowed_hosts(public_url: str, dev_port: int | None) -> AllowedHostsConfig | None:
    """The Host headers the app answers. A page on another site can point its own name at this
    machine (DNS rebinding) and so read our answers as same-origin; its requests still name
    its host, which is refused here (400). Without KB_PUBLIC_URL any host is served."""
    if dev_port is not None:
        hosts = [h for name in LOOPBACK_HOSTS for h in (name, f"{name}:{dev_port}")]
    elif public_url:
        hosts = [urllib.parse.urlsplit(public_url).netloc]
    else:
        return None
    return AllowedHostsConfig(allowed_hosts=hosts, exclude_opt_key=ANY_HOST, www_redirect=False)


def create_app(settings: Settings, dev_user: Caller | None = None, port: int = 8000) -> Litestar:
    """The app for `settings`, whose database URL is resolved; its pools open in the lifespan
    and close in `finally`. `dev_user` turns on the development sign-in, which signs anyone
    who opens the page in as that user (`kb serve --dev-user` allows it on loopback only), and
    then the app answers only to loopback names on `port`."""
    url = settings.database_url
    if not url:
        raise ValueError("the query service needs a database URL")
    service = settings.service
    if dev_user is not None:
        log.warning("development sign-in: whoever opens the page is %r with groups %s",
                    dev_user.subject, ", ".join(dev_user.groups))

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
            url, min_size=1, max_size=4, open=False, timeout=POOL_TIMEOUT_S,
            reconnect_timeout=RECONNECT_TIMEOUT_S, check=AsyncConnectionPool.check_connection,
            name="identity")
        # Two connections kept open: a search runs its two legs at once on two of them when
        # both are idle (kb_core/read_routing.py, run_paired).
        search_pool = ConnectionPool(
            url, min_size=2, max_size=8, open=False, timeout=POOL_TIMEOUT_S,
            reconnect_timeout=RECONNECT_TIMEOUT_S, configure=pooled_search_connection,
            check=ConnectionPool.check_connection, name="search")
        # Searches may run on streaming replicas (autocommit: the router checks a replica's
        # replay position before the search's transaction begins, kb_core/read_routing.py).
        replicas = [Replica(replica_name(read_url), ConnectionPool(
            read_url, min_size=2, max_size=8, open=False, timeout=POOL_TIMEOUT_S,
            reconnect_timeout=RECONNECT_TIMEOUT_S, configure=pooled_search_connection,
            check=ConnectionPool.check_connection, kwargs={"autocommit": True},
            name=f"replica-{i}")) for i, read_url in enumerate(settings.database_read_urls)]
        await state.identity_pool.open(wait=False)
        search_pool.open(wait=False)
        for replica in replicas:
            replica.pool.open(wait=False)
        reads = ReadRouter(search_pool, replicas)
        fence = asyncio.create_task(follow_index_changes(url, reads.fence)) if replicas else None
        state.service = KnowledgeService(search_pool, build_engine(settings), reads=reads)
        jwt = JwtSettings.from_settings(service)
        state.jwt = JwtVerifier(jwt) if jwt else None
        state.dev_user = dev_user
        state.oidc = None if dev_user else OidcProvider.from_settings(service, state.jwt)
        state.sessions = SessionStore.from_settings(service, dev_sign_in=dev_user is not None)
        state.document_downloads = service.document_downloads
        state.reviewer_group = service.reviewer_group
        state.rate_limiter = RateLimiter.from_settings(service)
        state.max_question_chars = service.max_question_chars
        purge = asyncio.create_task(
            _purge_periodically(state, service.query_log_retention_days))
        try:
            yield
        finally:
            for task in (purge, fence):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            for replica in replicas:
                replica.pool.close()
            search_pool.close()
            await state.identity_pool.close()

    return Litestar(
        route_handlers=[healthz, readyz, KnowledgeController, DocumentsController,
                        CorrectionsController, SignInController, page, static_files],
        lifespan=[lifespan],
        allowed_hosts=_allowed_hosts(service.public_url, port if dev_user else None),
        exception_handlers=EXCEPTION_HANDLERS,
        after_request=json_not_found,
        request_max_body_size=service.max_body_bytes,
        openapi_config=OpenAPIConfig(
            # No docs UI: the bundled ones load their JavaScript from a CDN (docs/architecture.md).
            title="社内ナレッジ検索", version="0.1.0", path="/schema", render_plugins=[],
            components=Components(security_schemes={BEARER: SecurityScheme(
                type="http", scheme="bearer",
                description="An app's API token (`kb token create`) or an employee's JWT")}),
        ),
    )
