"""Who may call the /v1 API, decided before anything the request sent is read: the caller,
verified from its credentials alone (never from the body) and rate-limited by its identity,
and the reviewers among callers. A refusal here is a 401, 403 or 429 whatever the request's
parameters or body hold."""

from __future__ import annotations

import hmac

from litestar import Request
from litestar.datastructures import State
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers import BaseRouteHandler

from kb_core.callers import Caller
from query_service.identity import IdentityError, identify
from query_service.sessions import CSRF_HEADER, WebSession

__all__ = ["is_reviewer", "requires_caller", "requires_reviewer", "session_caller"]


async def requires_caller(request: Request, _: BaseRouteHandler) -> None:
    """The guard of every /v1 route: the caller, from the Authorization header, or else from
    the page's session cookie, in which case a request that changes anything must also carry
    the session's CSRF token; kept for the handler (dependencies.provide_caller)."""
    state: State = request.app.state
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
    request.state.caller = caller


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


def is_reviewer(caller: Caller, state: State) -> bool:
    """Whether `caller` is a member of the reviewers' group (KB_REVIEWER_GROUP)."""
    return bool(state.reviewer_group) and state.reviewer_group in caller.groups


async def requires_reviewer(request: Request, _: BaseRouteHandler) -> None:
    """The guard of reviewing (corrections, the knowledge-gap report), after requires_caller:
    the caller must be a member of the reviewers' group (KB_REVIEWER_GROUP); 403 for anyone
    else."""
    if not is_reviewer(request.state.caller, request.app.state):
        raise PermissionDeniedException(detail="only members of the reviewers' group "
                                               "(KB_REVIEWER_GROUP) may do this")
