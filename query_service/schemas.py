"""The service's published contract: the request and response bodies of its own (the engine's
results are the engine's types), the limits a text or an id must keep, and the security scheme
every /v1 route states in OpenAPI."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

import msgspec
from litestar.params import Body, KwargDefinition, Parameter

from kb_core.read_routing import ReplicaStatus
from kb_search import MAX_PASSAGES, CorrectionForReview, RecentQuestion, ReopenedTurn
from query_service.hostile_input import storable

__all__ = [
    "BEARER",
    "CLOSED",
    "MAX_ID",
    "AskRequest",
    "CorrectionReceipt",
    "CorrectionRequest",
    "Conversation",
    "CorrectionsToReview",
    "FeedbackReceipt",
    "FeedbackRequest",
    "Health",
    "Id",
    "Readiness",
    "RecentQuestions",
    "RejectRequest",
    "RequestBody",
    "SearchRequest",
    "Text",
]

BEARER = "bearerToken"  # the OpenAPI security scheme: an API token or an employee's JWT

# The request limits are part of the published contract (OpenAPI), so a client, or schemathesis,
# can tell a valid request from an invalid one; msgspec enforces them with a 400. A text must
# hold something other than white space and control characters; the configurable length limit
# (KB_MAX_QUESTION_CHARS) is checked in the handler. Not a bare \S: Python counts U+001C–U+001F
# and U+0085 as white space and JSON Schema's regex dialect does not, nor U+FEFF the other way
# round, so a question of "\u001f" was valid by the contract yet refused.
Text = Annotated[str, msgspec.Meta(min_length=1, pattern=r"[^\s\x00-\x1f\x7f-\x9f\ufeff]")]

# The request structs refuse unknown fields (a body naming `groups` must fail loudly); OpenAPI
# has to say so, or a client (and schemathesis) takes extra properties for allowed.
CLOSED = Body(schema_extra={"additionalProperties": False})

# Ids are bigints in PostgreSQL, and JSON clients count exactly to 2^53: a larger number is a
# 400 here, not a database error (the schema states the bound exactly, as a float would not).
MAX_ID = 2**53
Id = Annotated[int, Parameter(ge=1, le=MAX_ID)]
# msgspec enforces the bounds; Litestar's OpenAPI reads them from KwargDefinition only, in a
# list's items (a client, and schemathesis, would take 0 for a valid id).
ChunkId = Annotated[int, msgspec.Meta(ge=1, le=MAX_ID), KwargDefinition(ge=1, le=MAX_ID)]


class RequestBody(msgspec.Struct, forbid_unknown_fields=True):
    """A request's body. Its texts arrive as PostgreSQL can store them (hostile_input.py)."""

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            if isinstance(value := getattr(self, name), str):
                setattr(self, name, storable(value))


class SearchRequest(RequestBody):
    query: Text
    k: Annotated[int, msgspec.Meta(ge=1, le=50)] = 10
    mode: Literal["hybrid", "vector", "keyword", "graph"] = "hybrid"


class AskRequest(RequestBody):
    question: Text
    stream: bool = False
    # auto: part by part when the question asks several things; flash: whole; deep: part by
    # part whenever it has parts (kb_search AskMode)
    mode: Literal["auto", "flash", "deep"] = "auto"
    # The query_id of an earlier answer this caller received: the question follows it and is
    # read in that conversation's context.
    follows: uuid.UUID | None = None


class FeedbackRequest(RequestBody):
    # A UUID, as /v1/ask returns it: anything else (`../../etc/passwd`, SQL) is refused with 400
    # before it reaches the database, which failed on it with a 500 (invalid input for uuid).
    query_id: uuid.UUID
    helpful: bool
    comment: Annotated[str, msgspec.Meta(max_length=4000)] | None = None


class CorrectionRequest(RequestBody):
    query_id: uuid.UUID  # the answer corrected: one this caller received
    correction: Annotated[Text, msgspec.Meta(max_length=2000)]
    # The passages of that answer the correction concerns (its citations' chunk_id).
    chunk_ids: Annotated[list[ChunkId], msgspec.Meta(min_length=1, max_length=MAX_PASSAGES)]


class RejectRequest(RequestBody):
    note: Annotated[str, msgspec.Meta(max_length=2000)] | None = None


class FeedbackReceipt(msgspec.Struct):
    ok: bool


class RecentQuestions(msgspec.Struct):
    questions: list[str]  # the questions alone, newest first
    # The same questions in the same order, each with the query_id of its latest answer: the
    # conversation GET /v1/conversations/{query_id} reopens.
    items: list[RecentQuestion] = []


class Conversation(msgspec.Struct):
    """A conversation reopened: its turns, the oldest first, ending at the answer asked for."""

    turns: list[ReopenedTurn]


class CorrectionReceipt(msgspec.Struct):
    id: int
    status: str


class CorrectionsToReview(msgspec.Struct):
    corrections: list[CorrectionForReview]


class Health(msgspec.Struct):
    status: str


class Readiness(msgspec.Struct):
    ready: bool
    database: bool
    embedder: str
    index_model: str
    detail: str | None = None
    replicas: list[ReplicaStatus] = []
