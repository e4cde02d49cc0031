"""Corrections over HTTP: any caller corrects an answer it received (the page, or an app with
its token); members of KB_REVIEWER_GROUP list, approve and reject the corrections of documents
they may read. Every state-changing request made with the page's session cookie carries its
CSRF token (provide_caller)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, TypeVar

import anyio
import msgspec
from litestar import Controller, Request, get, post
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import NotFoundException, PermissionDeniedException
from litestar.params import KwargDefinition

from kb_core.callers import Caller
from kb_search.corrections import (
    MAX_PASSAGES,
    CorrectionError,
    CorrectionForReview,
    UnknownCorrectionError,
    approve_correction,
    corrections_to_review,
    reject_correction,
    submit_correction,
)
from query_service.api import (
    BEARER,
    CLOSED,
    ERROR_RESPONSES,
    Text,
    error_response,
    exact_body,
    provide_caller,
    provide_session,
    storable,
)
from query_service.documents import MAX_ID, Id
from query_service.errors import ServiceError, refuse_unknown_query
from query_service.sessions import WebSession

__all__ = ["CorrectionsController", "is_reviewer"]

T = TypeVar("T")

RESPONSES = ERROR_RESPONSES | {
    403: error_response("Not a member of the reviewers' group (KB_REVIEWER_GROUP), or a "
                        "request made with the page's session cookie lacks its CSRF token"),
    404: error_response("No such correction among those the reviewer may read"),
}
# msgspec enforces the bounds; Litestar's OpenAPI reads them from KwargDefinition only, in a
# list's items (a client, and schemathesis, would take 0 for a valid id).
ChunkId = Annotated[int, msgspec.Meta(ge=1, le=MAX_ID), KwargDefinition(ge=1, le=MAX_ID)]


class CorrectionRequest(msgspec.Struct, forbid_unknown_fields=True):
    query_id: uuid.UUID  # the answer corrected: one this caller received
    correction: Annotated[Text, msgspec.Meta(max_length=2000)]
    # The passages of that answer the correction concerns (its citations' chunk_id).
    chunk_ids: Annotated[list[ChunkId], msgspec.Meta(min_length=1, max_length=MAX_PASSAGES)]


class RejectRequest(msgspec.Struct, forbid_unknown_fields=True):
    note: Annotated[str, msgspec.Meta(max_length=2000)] | None = None


class CorrectionReceipt(msgspec.Struct):
    id: int
    status: str


class CorrectionsToReview(msgspec.Struct):
    corrections: list[CorrectionForReview]


def is_reviewer(caller: Caller, state: State) -> bool:
    return bool(state.reviewer_group) and state.reviewer_group in caller.groups


def _name(caller: Caller, session: WebSession | None) -> str:
    """Who the caller is to people: the page's display name, else its subject (a token's
    name)."""
    return session.display_name if session is not None and session.caller == caller \
        else caller.subject


def _reviewer(caller: Caller, state: State) -> list[str]:
    """The groups a reviewer reads with; 403 for anyone else."""
    if not is_reviewer(caller, state):
        raise PermissionDeniedException(detail="only members of the reviewers' group review "
                                               "corrections")
    return list(caller.groups)


def _run(state: State, action: Callable[..., T], *args: object) -> T:
    """`action(connection, *args)` on a connection of the search pool, in a worker thread; a
    refused correction becomes its HTTP error."""
    try:
        with state.service.pool.connection() as conn:
            return action(conn, *args)
    except UnknownCorrectionError as exc:
        raise NotFoundException(str(exc)) from None
    except CorrectionError as exc:
        raise ServiceError(str(exc), code="invalid_correction") from None


class CorrectionsController(Controller):
    path = "/v1/corrections"
    tags = ["corrections"]
    dependencies = {"caller": Provide(provide_caller), "session": Provide(provide_session)}
    security = [{BEARER: []}]

    @post("/", operation_id="submit_correction", status_code=201, responses=RESPONSES)
    async def submit(self, request: Request, data: Annotated[CorrectionRequest, CLOSED],
                     caller: Caller, session: WebSession | None,
                     state: State) -> CorrectionReceipt:
        """Correct an answer this caller received; nobody sees it until a reviewer approves."""
        data = await exact_body(request, CorrectionRequest)
        correction_id = await anyio.to_thread.run_sync(
            _run, state, submit_correction, caller, _name(caller, session), str(data.query_id),
            storable(data.correction), data.chunk_ids)
        return CorrectionReceipt(id=correction_id, status="pending")

    @get("/", operation_id="corrections_to_review", responses=RESPONSES,
         before_request=refuse_unknown_query)
    async def to_review(self, caller: Caller, state: State) -> CorrectionsToReview:
        """Corrections awaiting review, of documents the reviewer may read, oldest first."""
        groups = _reviewer(caller, state)
        return CorrectionsToReview(
            await anyio.to_thread.run_sync(_run, state, corrections_to_review, groups))

    @post("/{correction_id:int}/approve", operation_id="approve_correction", status_code=200,
          responses=RESPONSES)
    async def approve(self, correction_id: Id, caller: Caller, session: WebSession | None,
                      state: State) -> CorrectionReceipt:
        """Approve a correction: a learned fact for the groups of every document it corrects."""
        groups = _reviewer(caller, state)
        await anyio.to_thread.run_sync(
            _run, state, approve_correction, correction_id, _name(caller, session),
            state.service.asker.searcher.embedder_for, groups)
        return CorrectionReceipt(id=correction_id, status="approved")

    @post("/{correction_id:int}/reject", operation_id="reject_correction", status_code=200,
          responses=RESPONSES)
    async def reject(self, request: Request, correction_id: Id,
                     data: Annotated[RejectRequest, CLOSED], caller: Caller,
                     session: WebSession | None, state: State) -> CorrectionReceipt:
        """Reject a correction; an approved one stops being served at once."""
        groups = _reviewer(caller, state)
        data = await exact_body(request, RejectRequest)
        note = storable(data.note) if data.note is not None else None
        await anyio.to_thread.run_sync(
            _run, state, reject_correction, correction_id, _name(caller, session), groups, note)
        return CorrectionReceipt(id=correction_id, status="rejected")
