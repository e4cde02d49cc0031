"""Corrections over HTTP: any caller corrects an answer it received (the page, or an app with
its token); members of KB_REVIEWER_GROUP list, approve and reject the corrections of documents
they may read. Every state-changing request made with the page's session cookie carries its
CSRF token (guards.requires_caller)."""

from __future__ import annotations

from typing import Annotated

import anyio
from litestar import Controller, get, post
from litestar.di import Provide

from kb_core.callers import Caller
from kb_search import Corrections
from query_service.dependencies import (
    ExactBody,
    provide_caller,
    provide_corrections,
    provide_display_name,
    provide_session,
)
from query_service.errors import ERROR_RESPONSES, error_response, refuse_unknown_query
from query_service.guards import requires_caller, requires_reviewer
from query_service.schemas import (
    BEARER,
    CLOSED,
    CorrectionReceipt,
    CorrectionRequest,
    CorrectionsToReview,
    Id,
    RejectRequest,
)

__all__ = ["CorrectionsController"]

RESPONSES = ERROR_RESPONSES | {
    403: error_response("Not a member of the reviewers' group (KB_REVIEWER_GROUP), or a "
                        "request made with the page's session cookie lacks its CSRF token"),
    404: error_response("No such correction among those the reviewer may read"),
}


class CorrectionsController(Controller):
    path = "/v1/corrections"
    tags = ["corrections"]
    guards = [requires_caller]
    dependencies = {
        "caller": Provide(provide_caller, sync_to_thread=False),
        "session": Provide(provide_session),
        "display_name": Provide(provide_display_name, sync_to_thread=False),
        "corrections": Provide(provide_corrections, sync_to_thread=False),
    }
    dto = ExactBody
    security = [{BEARER: []}]

    @post("/", operation_id="submit_correction", status_code=201, responses=RESPONSES)
    async def submit(self, data: Annotated[CorrectionRequest, CLOSED], caller: Caller,
                     display_name: str, corrections: Corrections) -> CorrectionReceipt:
        """Correct an answer this caller received; nobody sees it until a reviewer approves."""
        correction_id = await anyio.to_thread.run_sync(
            corrections.submit, caller, display_name, str(data.query_id), data.correction,
            data.chunk_ids)
        return CorrectionReceipt(id=correction_id, status="pending")

    @get("/", operation_id="corrections_to_review", responses=RESPONSES,
         guards=[requires_reviewer], before_request=refuse_unknown_query)
    async def to_review(self, caller: Caller, corrections: Corrections) -> CorrectionsToReview:
        """Corrections awaiting review, of documents the reviewer may read, oldest first."""
        return CorrectionsToReview(
            await anyio.to_thread.run_sync(corrections.to_review, caller))

    @post("/{correction_id:int}/approve", operation_id="approve_correction", status_code=200,
          responses=RESPONSES, guards=[requires_reviewer])
    async def approve(self, correction_id: Id, caller: Caller, display_name: str,
                      corrections: Corrections) -> CorrectionReceipt:
        """Approve a correction: a learned fact for the groups of every document it corrects."""
        await anyio.to_thread.run_sync(corrections.approve, caller, display_name,
                                       correction_id)
        return CorrectionReceipt(id=correction_id, status="approved")

    @post("/{correction_id:int}/reject", operation_id="reject_correction", status_code=200,
          responses=RESPONSES, guards=[requires_reviewer])
    async def reject(self, correction_id: Id, data: Annotated[RejectRequest, CLOSED],
                     caller: Caller, display_name: str,
                     corrections: Corrections) -> CorrectionReceipt:
        """Reject a correction; an approved one stops being served at once."""
        await anyio.to_thread.run_sync(corrections.reject, caller, display_name,
                                       correction_id, data.note)
        return CorrectionReceipt(id=correction_id, status="rejected")
