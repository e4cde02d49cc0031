"""The MCP door over Streamable HTTP, mounted at /mcp in the query service: every request is
verified as a /v1 request is (an app's API token or an employee's JWT as a bearer credential,
never the page's session cookie), rate-limited by that identity and bounded by the body limit,
before the SDK sees it; no credential, no tools.

Stateless, with JSON responses: each request carries and proves its own identity, so no
session outlives it to be reused by another credential or pinned to one worker, and the
tools answer once (no server-initiated messages to stream).

Wiring in the app (query_service/app.py): the lifespan sets `state.mcp` to an `McpEndpoint`
once the knowledge base and the identity pool are open; `mcp_lifespan`, listed after the
app's lifespan, runs its session manager; `mcp_mount` routes /mcp to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import msgspec
import psycopg
import psycopg_pool
from litestar import Litestar, asgi
from litestar.types import Message, Receive, Scope, Send
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import PARSE_ERROR
from psycopg_pool import AsyncConnectionPool

from kb_core.callers import Caller
from kb_search import KnowledgeBase
from query_service.errors import DatabaseHealth, RateLimitedError
from query_service.hostile_input import MAX_JSON_DEPTH, nested_too_deep
from query_service.identity import IdentityError, JwtVerifier, identify
from query_service.limits import QuestionLimit, RateLimiter
from query_service.mcp.server import CallerRefused, knowledge_server

__all__ = [
    "CALLER_SCOPE_KEY",
    "Identify",
    "McpEndpoint",
    "bearer_identity",
    "mcp_lifespan",
    "mcp_mount",
    "verified_caller",
]

CALLER_SCOPE_KEY = "kb.caller"  # where a request's verified caller rides to the tools
STATE_KEY = "mcp"  # the app state's McpEndpoint

# The verified caller of an Authorization header (None when absent): IdentityError for bad
# credentials, psycopg.OperationalError or PoolTimeout while the database is unreachable.
Identify = Callable[[str | None], Awaitable[Caller]]


def bearer_identity(pool: AsyncConnectionPool, verifier: JwtVerifier | None,
                    health: DatabaseHealth) -> Identify:
    """Identity as /v1 verifies it (query_service/guards.py, requires_caller), bearer credentials
    only: a cookie rides along with any site's request, and the MCP door has no CSRF token."""

    async def identify_bearer(authorization: str | None) -> Caller:
        if not authorization:
            raise IdentityError("expected an Authorization: Bearer header")
        try:
            async with pool.connection(timeout=health.wait_s) as aconn:
                health.answered()
                return await identify(authorization, aconn, verifier)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout):
            health.failed()
            raise

    return identify_bearer


async def verified_caller(request: Any) -> Caller:
    """The caller McpEndpoint verified for this HTTP request; never a default one."""
    caller = None if request is None else request.scope.get(CALLER_SCOPE_KEY)
    if not isinstance(caller, Caller):
        raise CallerRefused("no verified caller")
    return caller


class McpEndpoint:
    """The ASGI app behind /mcp: identity, rate limit and body limit, then the SDK's
    Streamable HTTP transport over `knowledge_server`. Serves only while `running()`."""

    def __init__(self, knowledge_base: KnowledgeBase, identify_caller: Identify,
                 rate_limiter: RateLimiter, *, question_limit: QuestionLimit,
                 max_body_bytes: int) -> None:
        self._identify = identify_caller
        self._rate_limiter = rate_limiter
        self._max_body_bytes = max_body_bytes
        server = knowledge_server(knowledge_base, verified_caller,
                                  question_limit=question_limit)
        self._sessions = StreamableHTTPSessionManager(
            app=server, stateless=True, json_response=True,
            max_request_body_size=max_body_bytes,
            # The service's own allowed hosts (KB_PUBLIC_URL) guard the Host header, and a page
            # that rebinds a name to us holds no bearer credential: the SDK's loopback-only
            # default would refuse the service's real name.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False))

    def running(self) -> AbstractAsyncContextManager[None]:
        """The transport's task group, for the app's lifespan (once per endpoint)."""
        return self._sessions.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008, "reason": "not found"})
            return
        if scope["path"] not in ("", "/"):  # what a mount leaves of /mcp and /mcp/
            await _refuse(send, 404, "not_found", "Not Found")
            return
        if scope["method"] != "POST":
            # Stateless: no session to end (DELETE), and a GET stream would stay open with
            # nothing ever sent on it; the transport allows a 405 for it.
            await _refuse(send, 405, "method_not_allowed", "the MCP endpoint takes POST",
                          {"Allow": "POST"})
            return
        headers = dict(scope["headers"])
        authorization = headers.get(b"authorization", b"").decode("latin-1") or None
        try:
            caller = await self._identify(authorization)
            self._rate_limiter.check(f"{caller.kind}:{caller.subject}")
        except IdentityError as exc:
            await _refuse(send, 401, "unauthorized", exc.reason,
                          {"WWW-Authenticate": 'Bearer realm="kb-search"'})
            return
        except RateLimitedError as exc:
            await _refuse(send, 429, exc.code, exc.detail,
                          {"Retry-After": str(exc.retry_after_s)})
            return
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout):
            await _refuse(send, 503, "database_unavailable",
                          "the database is unreachable; retry shortly", {"Retry-After": "5"})
            return
        body = await _body_within(receive, headers, self._max_body_bytes)
        if body is None:
            await _refuse(send, 413, "request_too_large",
                          f"request body larger than {self._max_body_bytes} bytes")
            return
        if nested_too_deep(b"".join(message.get("body", b"") for message in body)):
            # As the SDK answers JSON it cannot parse; its parser would recurse until a 500.
            await _send_json(send, 400, {
                "jsonrpc": "2.0", "id": "server-error", "error": {
                    "code": PARSE_ERROR,
                    "message": f"Parse error: JSON nested deeper than {MAX_JSON_DEPTH} arrays "
                               f"and objects"}})
            return
        await self._sessions.handle_request({**scope, CALLER_SCOPE_KEY: caller},
                                            _replay(body, receive), send)


async def _body_within(receive: Receive, headers: dict[bytes, bytes],
                       limit: int) -> list[Message] | None:
    """The request's body messages, or None once they exceed `limit` bytes (as /v1's
    request_max_body_size, which Litestar does not apply to a mounted app)."""
    declared = headers.get(b"content-length", b"")
    if declared.isdigit() and int(declared) > limit:
        return None
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages
        size += len(message.get("body", b""))
        if size > limit:
            return None
        if not message.get("more_body", False):
            return messages


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


async def _refuse(send: Send, status: int, code: str, detail: str,
                  headers: dict[str, str] | None = None) -> None:
    """The service's error body, {"error", "detail"} (query_service/errors.py)."""
    await _send_json(send, status, {"error": code, "detail": detail}, headers)


async def _send_json(send: Send, status: int, content: dict,
                     headers: dict[str, str] | None = None) -> None:
    body = msgspec.json.encode(content)
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


@asgi("/mcp", is_mount=True, copy_scope=True)
async def mcp_mount(scope: Scope, receive: Receive, send: Send) -> None:
    """The MCP door (Streamable HTTP): the app state's McpEndpoint."""
    endpoint: McpEndpoint = getattr(Litestar.from_scope(scope).state, STATE_KEY)
    await endpoint(scope, receive, send)


@asynccontextmanager
async def mcp_lifespan(app: Litestar) -> AsyncIterator[None]:
    """Runs the McpEndpoint the app's lifespan put in its state: listed after that lifespan,
    it starts once the pools are open and stops before they close."""
    endpoint: McpEndpoint = getattr(app.state, STATE_KEY)
    async with endpoint.running():
        yield
