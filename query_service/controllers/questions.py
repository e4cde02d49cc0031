"""Questions over HTTP: search, answers (whole, or streamed as Server-Sent Events), feedback on
an answer and the caller's recent questions."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Annotated

import anyio
import msgspec
from litestar import Controller, get, post
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIResponse, OpenAPIType, Operation, Schema
from litestar.response import Response, ServerSentEvent, ServerSentEventMessage

from kb_core.callers import Caller
from kb_search import (
    AnswerDelta,
    AnswerEvent,
    AskResult,
    OfferedPassages,
    QueryLog,
    Questions,
    SearchResult,
    Stage,
    public,
)
from query_service.dependencies import (
    ExactBody,
    provide_caller,
    provide_query_log,
    provide_questions,
)
from query_service.errors import (
    ERROR_RESPONSES,
    ServiceError,
    error_response,
    refuse_unknown_query,
)
from query_service.guards import requires_caller
from query_service.schemas import (
    BEARER,
    CLOSED,
    AskRequest,
    Conversation,
    FeedbackReceipt,
    FeedbackRequest,
    RecentQuestions,
    SearchRequest,
)

__all__ = ["QuestionsController"]

_UNKNOWN_ANSWER = ("names no answer this caller received (never given, purged, or another "
                   "caller's: one and the same)")


@dataclass
class AskOperation(Operation):
    """/v1/ask in OpenAPI: its 200 is JSON, or Server-Sent Events when `stream` is true."""

    def __post_init__(self) -> None:
        ok = (self.responses or {}).get("200")
        if isinstance(ok, OpenAPIResponse) and ok.content is not None:
            # One event: its name and its data, a JSON text.
            ok.content["text/event-stream"] = OpenAPIMediaType(schema=Schema(
                type=OpenAPIType.OBJECT, required=["event", "data"],
                description="`stage` events while it works (`{\"stage\": \"plan\", "
                            "\"parts\": [{\"question\", \"label\"}]}` (none for a question "
                            "answered whole), `{\"stage\": \"part\", \"index\", \"found\", "
                            "\"hits\"}` for each part searched, `{\"stage\": \"answer\"}`), "
                            "`citations` (the passages offered, by their own `passage` "
                            "number), `delta` events with text and the [n] it cites first "
                            "(`cited`: n and passage), then `done` carrying the full answer "
                            "JSON",
                properties={
                    "event": Schema(type=OpenAPIType.STRING,
                                    enum=["stage", "citations", "delta", "done"]),
                    "data": Schema(type=OpenAPIType.STRING, content_media_type="application/json"),
                }))


class QuestionsController(Controller):
    path = "/v1"
    tags = ["knowledge"]
    guards = [requires_caller]
    dependencies = {"caller": Provide(provide_caller, sync_to_thread=False),
                    "questions": Provide(provide_questions, sync_to_thread=False),
                    "query_log": Provide(provide_query_log, sync_to_thread=False)}
    dto = ExactBody
    security = [{BEARER: []}]

    @post("/search", operation_id="search", status_code=200, responses=ERROR_RESPONSES)
    async def search(self, data: Annotated[SearchRequest, CLOSED], caller: Caller,
                     questions: Questions, state: State) -> SearchResult:
        """Hybrid search over the documents the caller may see."""
        query = state.question_limit.check(data.query, "query")
        return public(await anyio.to_thread.run_sync(questions.search, caller, query, data.k,
                                                     data.mode))

    # Annotated Response[AskResult], not `AskResult | ServerSentEvent`: the union became
    # `oneOf: [AskResult, {}]` in OpenAPI, which no answer can satisfy (it matches both).
    @post("/ask", operation_id="ask", status_code=200, operation_class=AskOperation,
          responses=ERROR_RESPONSES | {404: error_response(f"`follows` {_UNKNOWN_ANSWER}")})
    async def ask(self, data: Annotated[AskRequest, CLOSED], caller: Caller,
                  questions: Questions, state: State) -> Response[AskResult]:
        """A short answer with [n] citations, or 「該当する記載が見つかりませんでした。」."""
        question = state.question_limit.check(data.question, "question")
        follows = str(data.follows) if data.follows is not None else None
        if data.stream:
            # The conversation is read before the stream starts: an unknown `follows` is a 404,
            # not an error event after a 200.
            events = await anyio.to_thread.run_sync(lambda: questions.ask_events(
                caller, question, mode=data.mode, follows=follows))
            return ServerSentEvent(_answer_events(events))
        return Response(public(await anyio.to_thread.run_sync(
            lambda: questions.ask(caller, question, mode=data.mode, follows=follows))))

    @post("/feedback", operation_id="feedback", status_code=200, responses=ERROR_RESPONSES)
    async def feedback(self, data: Annotated[FeedbackRequest, CLOSED], caller: Caller,
                       query_log: QueryLog) -> FeedbackReceipt:
        """Mark an answer this caller received as helpful or not, with an optional comment."""
        if not await anyio.to_thread.run_sync(query_log.feedback, caller, str(data.query_id),
                                              data.helpful, data.comment):
            raise ServiceError("no such query for this caller", code="unknown_query")
        return FeedbackReceipt(ok=True)

    @get("/recent-questions", operation_id="recent_questions", responses=ERROR_RESPONSES,
         before_request=refuse_unknown_query)
    async def recent_questions(self, caller: Caller, query_log: QueryLog) -> RecentQuestions:
        """The caller's own latest questions, newest first: their text, and each with the
        query_id of its latest answer (the conversation it reopens)."""
        recent = await anyio.to_thread.run_sync(query_log.recent, caller)
        return RecentQuestions([r.question for r in recent], recent)

    @get("/conversations/{query_id:uuid}", operation_id="conversation",
         before_request=refuse_unknown_query,
         responses=ERROR_RESPONSES | {404: error_response(f"`query_id` {_UNKNOWN_ANSWER}")})
    async def conversation(self, query_id: uuid.UUID, caller: Caller,
                           query_log: QueryLog) -> Conversation:
        """The caller's conversation ending at its answer `query_id`, oldest turn first (at most
        the latest 20), each answer shown only while every passage it cited is readable."""
        return Conversation(await anyio.to_thread.run_sync(query_log.reopen, caller,
                                                           str(query_id)))


async def _answer_events(events: Iterator[AnswerEvent]
                         ) -> AsyncIterator[ServerSentEventMessage]:
    """The engine's answer events as Server-Sent Events, each taken in a worker thread. A
    client that goes away stops the work: its parts not yet searched never are."""
    try:
        while (event := await anyio.to_thread.run_sync(next, events, None)) is not None:
            yield _message(event)
    finally:
        events.close()


def _message(event: AnswerEvent) -> ServerSentEventMessage:
    """`stage` (the work's progress), `citations` (the passages offered), `delta` (text, with
    the citation numbers it uses first: the engine's AnswerDelta is the wire's), then `done`
    (the answer, authoritative)."""
    if isinstance(event, Stage):
        return ServerSentEventMessage(event="stage", data=_json(event))
    if isinstance(event, OfferedPassages):
        return ServerSentEventMessage(event="citations", data=_json(event))
    if isinstance(event, AnswerDelta):
        return ServerSentEventMessage(event="delta", data=_json(event))
    return ServerSentEventMessage(event="done", data=_json(public(event)))


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()
