"""HTTP handlers: thin over KnowledgeService. Every route but the health ones needs a verified
caller; the caller's groups come from its credentials alone, never from the request body."""

from __future__ import annotations

import hmac
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Literal, TypeVar

import anyio
import msgspec
from litestar import Controller, Request, get, post
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIResponse, OpenAPIType, Operation, Schema
from litestar.params import Body
from litestar.response import Response, ServerSentEvent, ServerSentEventMessage

from kb_core.callers import Caller
from kb_search.asking import AskResult, PreparedAnswer
from kb_search.knowledge import KnowledgeService, public
from kb_search.search import SearchResult
from query_service.errors import ServiceError, refuse_unknown_query
from query_service.identity import IdentityError, identify
from query_service.sessions import CSRF_HEADER, WebSession

__all__ = [
    "BEARER",
    "CLOSED",
    "ERROR_RESPONSES",
    "ErrorBody",
    "KnowledgeController",
    "Text",
    "error_response",
    "exact_body",
    "provide_caller",
    "provide_session",
    "session_caller",
    "storable",
]

BEARER = "bearerToken"  # the OpenAPI security scheme: an API token or an employee's JWT

# The request limits are part of the published contract (OpenAPI), so a client, or schemathesis,
# can tell a valid request from an invalid one; msgspec enforces them with a 400. A text must
# hold something other than white space and control characters; the configurable length limit
# (KB_MAX_QUESTION_CHARS) is checked in the handler. Not a bare \S: Python counts U+001C–U+001F
# and U+0085 as white space and JSON Schema's regex dialect does not, nor U+FEFF the other way
# round, so a question of "\u001f" was valid by the contract yet refused.
Text = Annotated[str, msgspec.Meta(min_length=1, pattern=r"[^\s\x00-\x1f\x7f-\x9f\ufeff]")]


class SearchRequest(msgspec.Struct, forbid_unknown_fields=True):
    query: Text
    k: Annotated[int, msgspec.Meta(ge=1, le=50)] = 10
    mode: Literal["hybrid", "vector", "keyword"] = "hybrid"


class AskRequest(msgspec.Struct, forbid_unknown_fields=True):
    question: Text
    stream: bool = False


class FeedbackRequest(msgspec.Struct, forbid_unknown_fields=True):
    # A UUID, as /v1/ask returns it: anything else (`../../etc/passwd`, SQL) is refused with 400
    # before it reaches the database, which failed on it with a 500 (invalid input for uuid).
    query_id: uuid.UUID
    helpful: bool
    comment: Annotated[str, msgspec.Meta(max_length=4000)] | None = None


S = TypeVar("S", bound=msgspec.Struct)

# The request structs refuse unknown fields (a body naming `groups` must fail loudly); OpenAPI
# has to say so, or a client (and schemathesis) takes extra properties for allowed.
CLOSED = Body(schema_extra={"additionalProperties": False})


class FeedbackReceipt(msgspec.Struct):
    ok: bool


class RecentQuestions(msgspec.Struct):
    questions: list[str]


class OfferedPassage(msgspec.Struct):
    """A passage the answerer is given, before it answers: what a citation may come to be."""

    passage: int  # the number a delta's `cited` and the answer's citations refer to it by
    path: str
    title: str
    heading: str
    page: str | None
    chunk_id: int
    # Where the page's citation card opens the source (GET /v1/documents/{id}); null for a
    # learned fact, which has no document of its own.
    document_id: int | None
    learned_fact: bool


class OfferedPassages(msgspec.Struct):
    """The stream's `citations` event: the passages offered, under their own numbers. Not the
    answer's [n]: those come with the deltas that first use them."""

    passages: list[OfferedPassage]


class ErrorBody(msgspec.Struct):
    """Every error response: a stable code and a sentence for people (errors.py)."""

    error: str
    detail: str


def error_response(description: str) -> ResponseSpec:
    return ResponseSpec(data_container=ErrorBody, description=description,
                        generate_examples=False)


# Documented on every handler: Litestar's default 400 schema ({status_code, detail, extra}) is
# not what errors.py sends, and clients need to know the 401/413/429/503 bodies too.
ERROR_RESPONSES = {
    400: error_response("Invalid request: malformed JSON, unknown, missing or out-of-range "
                        "fields, empty or too long text, unknown query id"),
    401: error_response("Missing, unknown, revoked or expired credentials or session"),
    403: error_response("A request made with the page's session cookie lacks its CSRF token"),
    413: error_response("Request body larger than the limit (64 KiB)"),
    429: error_response("Too many requests from this caller; retry after Retry-After seconds"),
    503: error_response("The database is unreachable; retry shortly"),
}


@dataclass
class AskOperation(Operation):
    """/v1/ask in OpenAPI: its 200 is JSON, or Server-Sent Events when `stream` is true."""

    def __post_init__(self) -> None:
        ok = (self.responses or {}).get("200")
        if isinstance(ok, OpenAPIResponse) and ok.content is not None:
            # One event: its name and its data, a JSON text.
            ok.content["text/event-stream"] = OpenAPIMediaType(schema=Schema(
                type=OpenAPIType.OBJECT, required=["event", "data"],
                description="`citations` (the passages offered, by their own `passage` "
                            "number), `delta` events with text and the [n] it cites first "
                            "(`cited`: n and passage), then `done` carrying the full answer "
                            "JSON",
                properties={
                    "event": Schema(type=OpenAPIType.STRING,
                                    enum=["citations", "delta", "done"]),
                    "data": Schema(type=OpenAPIType.STRING, content_media_type="application/json"),
                }))


async def provide_caller(request: Request, state: State) -> Caller:
    """The verified caller of this request, rate-limited by its identity: from the
    Authorization header, or else from the page's session cookie, in which case a request that
    changes anything must also carry the session's CSRF token."""
    authorization = request.headers.get("authorization")
    session_id = request.cookies.get(state.sessions.cookie_name)
    try:
        # The first database work of every request: while the database is known to be down,
        # wait briefly, so the outage is answered with a prompt 503 (errors.DatabaseHealth).
        async with state.identity_pool.connection(timeout=state.database.wait_s) as aconn:
            state.database.answered()
            if authorization is None and session_id:
                caller = session_caller(request, await state.sessions.find(aconn, session_id))
            else:
                caller = await identify(authorization, aconn, state.jwt)
    except IdentityError as exc:
        raise NotAuthorizedException(detail=exc.reason) from None
    state.rate_limiter.check(f"{caller.kind}:{caller.subject}")
    return caller


async def provide_session(request: Request, state: State) -> WebSession | None:
    """The page's session of this browser, if it has a live one."""
    session_id = request.cookies.get(state.sessions.cookie_name)
    if not session_id:
        return None
    async with state.identity_pool.connection(timeout=state.database.wait_s) as aconn:
        return await state.sessions.find(aconn, session_id)


def session_caller(request: Request, session: WebSession | None) -> Caller:
    """The caller of a live session; a request that changes anything must repeat the
    session's CSRF token (PermissionDeniedException otherwise)."""
    if session is None:
        raise IdentityError("session expired or unknown; sign in again")
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        # A cookie rides along with any site's form or fetch; the token only with our page's.
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), session.csrf_token.encode()):
            raise PermissionDeniedException(detail="missing or wrong CSRF token")
    return session.caller


def _checked(text: str, state: State, field: str) -> str:
    if not text.strip():
        raise ServiceError(f"{field} is empty")
    if len(text) > state.max_question_chars:
        raise ServiceError(f"{field} has {len(text)} characters; the limit is "
                           f"{state.max_question_chars}", code="question_too_long")
    return storable(text)


def storable(text: str) -> str:
    """`text` with NUL, which JSON allows and PostgreSQL text cannot hold (a search or a logged
    question holding one failed with a 500), replaced by U+FFFD as for any undecodable input."""
    return text.replace("\x00", "\ufffd")


class KnowledgeController(Controller):
    path = "/v1"
    tags = ["knowledge"]
    dependencies = {"caller": Provide(provide_caller)}
    security = [{BEARER: []}]

    @post("/search", operation_id="search", status_code=200, responses=ERROR_RESPONSES)
    async def search(self, request: Request, data: Annotated[SearchRequest, CLOSED],
                     caller: Caller, state: State) -> SearchResult:
        """Hybrid search over the documents the caller may see."""
        data = await exact_body(request, SearchRequest)
        query = _checked(data.query, state, "query")
        service: KnowledgeService = state.service
        return public(await anyio.to_thread.run_sync(service.search, caller, query, data.k,
                                                     data.mode))

    # Annotated Response[AskResult], not `AskResult | ServerSentEvent`: the union became
    # `oneOf: [AskResult, {}]` in OpenAPI, which no answer can satisfy (it matches both).
    @post("/ask", operation_id="ask", status_code=200, responses=ERROR_RESPONSES,
          operation_class=AskOperation)
    async def ask(self, request: Request, data: Annotated[AskRequest, CLOSED], caller: Caller,
                  state: State) -> Response[AskResult]:
        """A short answer with [n] citations, or 「該当する記載が見つかりませんでした。」."""
        data = await exact_body(request, AskRequest)
        question = _checked(data.question, state, "question")
        if data.stream:
            return ServerSentEvent(_answer_events(state.service, caller, question))
        return Response(public(await anyio.to_thread.run_sync(state.service.ask, caller,
                                                              question)))

    @post("/feedback", operation_id="feedback", status_code=200, responses=ERROR_RESPONSES)
    async def feedback(self, request: Request, data: Annotated[FeedbackRequest, CLOSED],
                       caller: Caller, state: State) -> FeedbackReceipt:
        """Mark an answer this caller received as helpful or not, with an optional comment."""
        data = await exact_body(request, FeedbackRequest)
        comment = storable(data.comment) if data.comment is not None else None
        found = await anyio.to_thread.run_sync(
            state.service.feedback, caller, str(data.query_id), data.helpful, comment)
        if not found:
            raise ServiceError("no such query for this caller", code="unknown_query")
        return FeedbackReceipt(ok=True)

    @get("/recent-questions", operation_id="recent_questions", responses=ERROR_RESPONSES,
         before_request=refuse_unknown_query)
    async def recent_questions(self, caller: Caller, state: State) -> RecentQuestions:
        """The caller's own latest questions (their text only), newest first."""
        service: KnowledgeService = state.service
        return RecentQuestions(await anyio.to_thread.run_sync(service.recent_questions, caller))


async def exact_body(request: Request, struct: type[S]) -> S:
    """The body read with the types the schema states. Litestar converts bodies in lax mode,
    which took 0 for false and "5" for 5 (schemathesis sent {"stream": 0} and got an answer):
    a client that sends other types has a bug it should hear about. JSON Schema counts 28.0
    as an integer, so integral numbers stay acceptable wherever an integer is."""
    try:
        return msgspec.convert(_integral(msgspec.json.decode(await request.body())), struct)
    except msgspec.ValidationError as exc:
        raise ServiceError(f"invalid request body: {exc}") from None


def _integral(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    return value


async def _answer_events(service: KnowledgeService, caller: Caller,
                         question: str) -> AsyncIterator[ServerSentEventMessage]:
    """`citations` (the passages offered), `delta` text events, each with the citation numbers
    it uses first, then `done` with the result, which is authoritative."""
    query_id, prepared = await anyio.to_thread.run_sync(service.prepare_stream, caller, question)
    yield ServerSentEventMessage(event="citations", data=_json(_offered(prepared)))
    stream = service.stream(prepared)
    deltas = iter(stream)
    while (delta := await anyio.to_thread.run_sync(next, deltas, None)) is not None:
        # The engine's AnswerDelta is the wire's: {"text": ..., "cited": [{"n", "passage"}]}.
        yield ServerSentEventMessage(event="delta", data=_json(delta))
    result = await anyio.to_thread.run_sync(
        service.finish_stream, caller, question, query_id, prepared, stream)
    yield ServerSentEventMessage(event="done", data=_json(public(result)))


def _offered(prepared: PreparedAnswer) -> OfferedPassages:
    hits = {h.chunk_id: h for h in prepared.search.hits}
    return OfferedPassages(passages=[
        OfferedPassage(passage=p.n, path=p.path, title=p.title, heading=p.heading, page=p.page,
                       chunk_id=p.chunk_id, document_id=hits[p.chunk_id].document_id,
                       learned_fact=hits[p.chunk_id].learned_fact)
        for p in prepared.passages])


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()
