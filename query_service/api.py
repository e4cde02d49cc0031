"""HTTP handlers: thin over KnowledgeService. Every route but the health ones needs a verified
caller; the caller's groups come from its credentials alone, never from the request body."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal

import anyio
import msgspec
from litestar import Controller, Request, post
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import NotAuthorizedException
from litestar.response import ServerSentEvent, ServerSentEventMessage

from query_service.asking import AskResult
from query_service.errors import ServiceError
from query_service.identity import Caller, IdentityError, identify
from query_service.search import SearchResult
from query_service.service import KnowledgeService, public

__all__ = ["KnowledgeController", "provide_caller"]


class SearchRequest(msgspec.Struct, forbid_unknown_fields=True):
    query: str
    k: int = 10
    mode: Literal["hybrid", "vector", "keyword"] = "hybrid"


class AskRequest(msgspec.Struct, forbid_unknown_fields=True):
    question: str
    stream: bool = False


class FeedbackRequest(msgspec.Struct, forbid_unknown_fields=True):
    query_id: str
    helpful: bool
    comment: str | None = None


class FeedbackReceipt(msgspec.Struct):
    ok: bool


async def provide_caller(request: Request, state: State) -> Caller:
    """The verified caller of this request, rate-limited by its identity."""
    try:
        async with state.identity_pool.connection() as aconn:
            caller = await identify(request.headers.get("authorization"), aconn, state.jwt)
    except IdentityError as exc:
        raise NotAuthorizedException(detail=exc.reason) from None
    state.rate_limiter.check(f"{caller.kind}:{caller.subject}")
    return caller


def _checked(text: str, state: State, field: str) -> str:
    if not text.strip():
        raise ServiceError(f"{field} is empty")
    if len(text) > state.max_question_chars:
        raise ServiceError(f"{field} has {len(text)} characters; the limit is "
                           f"{state.max_question_chars}", code="question_too_long")
    return text


class KnowledgeController(Controller):
    path = "/v1"
    tags = ["knowledge"]
    dependencies = {"caller": Provide(provide_caller)}

    @post("/search", operation_id="search", status_code=200)
    async def search(self, data: SearchRequest, caller: Caller, state: State) -> SearchResult:
        """Hybrid search over the documents the caller may see."""
        if not 1 <= data.k <= 50:
            raise ServiceError("k must be between 1 and 50")
        query = _checked(data.query, state, "query")
        service: KnowledgeService = state.service
        return public(await anyio.to_thread.run_sync(service.search, caller, query, data.k,
                                                     data.mode))

    @post("/ask", operation_id="ask", status_code=200)
    async def ask(self, data: AskRequest, caller: Caller,
                  state: State) -> AskResult | ServerSentEvent:
        """A short answer with [n] citations, or 「該当する記載が見つかりませんでした。」."""
        question = _checked(data.question, state, "question")
        if data.stream:
            return ServerSentEvent(_answer_events(state.service, caller, question))
        return public(await anyio.to_thread.run_sync(state.service.ask, caller, question))

    @post("/feedback", operation_id="feedback", status_code=200)
    async def feedback(self, data: FeedbackRequest, caller: Caller,
                       state: State) -> FeedbackReceipt:
        """Mark an answer this caller received as helpful or not, with an optional comment."""
        if data.comment is not None and len(data.comment) > 4000:
            raise ServiceError("comment is longer than 4000 characters")
        found = await anyio.to_thread.run_sync(
            state.service.feedback, caller, data.query_id, data.helpful, data.comment)
        if not found:
            raise ServiceError("no such query for this caller", code="unknown_query")
        return FeedbackReceipt(ok=True)


async def _answer_events(service: KnowledgeService, caller: Caller,
                         question: str) -> AsyncIterator[ServerSentEventMessage]:
    """`citations` (the passages offered), `delta` text events, then `done` with the result."""
    query_id, prepared = await anyio.to_thread.run_sync(service.prepare_stream, caller, question)
    offered = [{"n": p.n, "path": p.path, "title": p.title, "heading": p.heading,
                "page": p.page, "chunk_id": p.chunk_id} for p in prepared.passages]
    yield ServerSentEventMessage(event="citations", data=_json({"passages": offered}))
    stream = service.stream(prepared, question)
    deltas = iter(stream)
    while (delta := await anyio.to_thread.run_sync(next, deltas, None)) is not None:
        yield ServerSentEventMessage(event="delta", data=_json({"text": delta}))
    result = await anyio.to_thread.run_sync(
        service.finish_stream, caller, question, query_id, prepared, stream)
    yield ServerSentEventMessage(event="done", data=_json(public(result)))


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()
