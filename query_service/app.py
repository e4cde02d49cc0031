"""The query service's Litestar app: its assembly from the controllers, dependencies and error
handlers; the lifespan that opens the knowledge base and the identity pool and closes them; and
the health endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import anyio
import psycopg
from litestar import Litestar, get
from litestar.config.allowed_hosts import AllowedHostsConfig
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.response import Response
from litestar.status_codes import HTTP_200_OK, HTTP_503_SERVICE_UNAVAILABLE
from psycopg_pool import AsyncConnectionPool

from kb_core.backups import restore_awaiting_rules
from kb_core.callers import Caller
from kb_core.embeddings import UnknownEmbedderError
from kb_core.index_model import recorded_model_async
from kb_core.settings import Settings
from kb_search import Operations, open_knowledge_base
from query_service.controllers import (
    CorrectionsController,
    DocumentsController,
    EntitiesController,
    GapsController,
    QuestionsController,
)
from query_service.dependencies import provide_operations
from query_service.errors import EXCEPTION_HANDLERS, DatabaseHealth, json_not_found
from query_service.hostile_input import nul_free_parameters
from query_service.identity import JwtSettings, JwtVerifier
from query_service.limits import QuestionLimit, RateLimiter
from query_service.mcp.http import McpEndpoint, bearer_identity, mcp_lifespan, mcp_mount
from query_service.oidc import OidcProvider, purge_sign_in_attempts
from query_service.page import page, static_files
from query_service.schemas import BEARER, Health, Readiness
from query_service.sessions import SessionStore
from query_service.signin import SignInController

__all__ = ["create_app"]

log = logging.getLogger(__name__)

# The development sign-in answers to these names only (with or without the port).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
ANY_HOST = "any_host"  # a route's opt key: served whatever its Host header (health probes)
POOL_TIMEOUT_S = 5.0  # the longest a request waits for a connection while the database is up
RECONNECT_TIMEOUT_S = 1.0
# Worker threads search and answer at once, each on a connection of the knowledge base's pools.
SEARCH_CONNECTIONS = 8
# The longest readiness waits for a connection on the primary.
READY_WAIT_S = 2.0


@get("/healthz", operation_id="healthz", tags=["health"], opt={ANY_HOST: True})
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


@get("/readyz", operation_id="readyz", tags=["health"], opt={ANY_HOST: True})
async def readyz(state: State, operations: Operations) -> Response[Readiness]:
    """Ready when the database answers, questions can be embedded with the live index's model
    (which during a rebuild with a new model is not KB_EMBEDDER's), and, after a restore, the
    folder sensor has read the access rules again; each read replica's state is reported, and
    none is needed while the primary answers."""
    replicas = await anyio.to_thread.run_sync(operations.replica_status)
    try:
        # On the door's own pool, not the search pool: a service busy answering is still ready.
        async with state.identity_pool.connection(timeout=READY_WAIT_S) as conn:
            model = await recorded_model_async(conn) or operations.configured_model
            restored_at = await restore_awaiting_rules(conn)
        state.database.answered()
    except (psycopg.Error, TimeoutError, OSError) as exc:
        state.database.failed()
        body = Readiness(False, False, operations.configured_model, "unknown",
                         f"database: {exc}", replicas)
        return Response(body, status_code=HTTP_503_SERVICE_UNAVAILABLE)
    if restored_at is not None:
        # A rule edited since the backup was taken must narrow its documents before anyone
        # searches them (kb restore; docs/backups.md).
        body = Readiness(False, True, model, "ok", f"restored from a backup at {restored_at}: "
                         "waiting for the folder sensor to read the access rules again",
                         replicas)
        return Response(body, status_code=HTTP_503_SERVICE_UNAVAILABLE)
    try:
        embedder = operations.query_embedder(model)
    except UnknownEmbedderError as exc:
        body = Readiness(False, True, model, "mismatch", str(exc), replicas)
        return Response(body, status_code=HTTP_503_SERVICE_UNAVAILABLE)
    body = Readiness(True, True, embedder, "ok", replicas=replicas)
    return Response(body, status_code=HTTP_200_OK)


async def _purge_periodically(state: State, days: int) -> None:
    """At start-up, then daily: drop query log entries past their retention (questions can
    hold personal data), ended sessions (and development ones when the development sign-in is
    off) and sign-ins that can no longer finish."""
    while True:
        try:
            purged = await asyncio.to_thread(state.knowledge_base.query_log.purge, days)
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
    """The app for `settings`, whose database URL is resolved; its knowledge base and identity
    pool open in the lifespan and close in `finally`. `dev_user` turns on the development
    sign-in, which signs anyone who opens the page in as that user (`kb serve --dev-user`
    allows it on loopback only), and then the app answers only to loopback names on `port`."""
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
        jwt = JwtSettings.from_settings(service)
        state.jwt = JwtVerifier(jwt) if jwt else None
        state.dev_user = dev_user
        state.oidc = None if dev_user else OidcProvider.from_settings(service, state.jwt)
        state.sessions = SessionStore.from_settings(service, dev_sign_in=dev_user is not None)
        state.document_downloads = service.document_downloads
        state.reviewer_group = service.reviewer_group
        state.rate_limiter = RateLimiter.from_settings(service)
        state.question_limit = QuestionLimit(service.max_question_chars)
        # Opening prepares the database (migrations), which blocks: not on the event loop.
        state.knowledge_base = await anyio.to_thread.run_sync(
            partial(open_knowledge_base, settings, connections=SEARCH_CONNECTIONS,
                    outage_ok=True))
        # Identity lookups are small queries on the event loop, on the door's own pool; search
        # and answering are CPU work (embedding, sentence scoring) that runs in worker threads
        # on the knowledge base's pools. reconnect_timeout: a pool retries a failed connection
        # with exponential backoff (1, 2, 4, 8, 16, 32 s ...) and starts no other attempt
        # meanwhile, so after a 20 s database restart the service stayed unready for another
        # 10 s and more. Giving up after 1 s lets the next request that needs a connection start
        # a fresh attempt at once.
        state.database = DatabaseHealth(wait_up_s=POOL_TIMEOUT_S)
        state.identity_pool = AsyncConnectionPool(
            url, min_size=1, max_size=4, open=False, timeout=POOL_TIMEOUT_S,
            reconnect_timeout=RECONNECT_TIMEOUT_S, check=AsyncConnectionPool.check_connection,
            name="identity")
        await state.identity_pool.open(wait=False)
        state.mcp = McpEndpoint(
            state.knowledge_base,
            bearer_identity(state.identity_pool, state.jwt, state.database),
            state.rate_limiter, question_limit=state.question_limit,
            max_body_bytes=service.max_body_bytes)
        tasks = [asyncio.create_task(state.knowledge_base.operations.follow_index_changes()),
                 asyncio.create_task(
                     _purge_periodically(state, service.query_log_retention_days))]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await anyio.to_thread.run_sync(state.knowledge_base.close)
            await state.identity_pool.close()

    return Litestar(
        route_handlers=[healthz, readyz, QuestionsController, DocumentsController,
                        EntitiesController, CorrectionsController, GapsController,
                        SignInController, page, static_files, mcp_mount],
        dependencies={"operations": Provide(provide_operations, sync_to_thread=False)},
        # The MCP session manager runs once the pools are open and stops before they close.
        lifespan=[lifespan, mcp_lifespan],
        allowed_hosts=_allowed_hosts(service.public_url, port if dev_user else None),
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[nul_free_parameters],
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
