"""The knowledge-gap report over HTTP, for members of KB_REVIEWER_GROUP: what employees asked
that no document answered, by topic, with the documents going stale or never cited; a reviewer
sees a question only when every group of its asker is one of its own, and a document only when
it may read it."""

from __future__ import annotations

from typing import Annotated

import anyio
from litestar import Controller, get
from litestar.di import Provide
from litestar.params import Parameter

from kb_core.callers import Caller
from kb_search import GapReport, Gaps
from query_service.dependencies import provide_caller, provide_gaps
from query_service.errors import ERROR_RESPONSES, error_response, refuse_unknown_query
from query_service.guards import requires_caller, requires_reviewer
from query_service.schemas import BEARER

__all__ = ["GapsController"]

RESPONSES = ERROR_RESPONSES | {
    403: error_response("Not a member of the reviewers' group (KB_REVIEWER_GROUP)"),
}


class GapsController(Controller):
    path = "/v1/gaps"
    tags = ["knowledge gaps"]
    guards = [requires_caller, requires_reviewer]
    dependencies = {"caller": Provide(provide_caller, sync_to_thread=False),
                    "gaps": Provide(provide_gaps, sync_to_thread=False)}
    security = [{BEARER: []}]

    @get("/", operation_id="knowledge_gaps", responses=RESPONSES,
         before_request=refuse_unknown_query)
    async def report(self, caller: Caller, gaps: Gaps,
                     days: Annotated[int, Parameter(ge=1, le=366)] = 30) -> GapReport:
        """The knowledge-gap report of the last `days` days, as this reviewer may see it."""
        return await anyio.to_thread.run_sync(gaps.report, caller, days)
