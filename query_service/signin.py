"""Signing in to the page and out of it: the company's OpenID Connect provider (oidc.py), or the
development sign-in of `kb serve --dev-user`, which names one user and its groups on the
command line. Either way a new session id is issued at sign-in (sessions.py). Browser routes,
kept out of the API's OpenAPI document."""

from __future__ import annotations

import logging

from litestar import Controller, Request, get, post
from litestar.datastructures import Cookie, State
from litestar.di import Provide
from litestar.response import Redirect, Response
from litestar.status_codes import HTTP_204_NO_CONTENT, HTTP_303_SEE_OTHER

from kb_core.callers import Caller
from query_service.dependencies import provide_session
from query_service.errors import ServiceError
from query_service.guards import session_caller
from query_service.oidc import ATTEMPT_VALID_S, SignInError, is_relative_target
from query_service.page import sign_in_refused
from query_service.sessions import SessionStore, WebSession

__all__ = ["SignInController"]

log = logging.getLogger(__name__)


def _browser_cookie_name(store: SessionStore) -> str:
    """The cookie that binds a sign-in's `state` to the browser that started it; __Host- where
    it is Secure, as the session's (sessions.py), so a sibling subdomain cannot plant one."""
    return "__Host-kb_signin" if store.secure else "kb_signin"


def _browser_cookie(store: SessionStore, value: str, max_age: int) -> Cookie:
    # Lax: the provider sends the browser back with a top-level GET, which carries it.
    return Cookie(key=_browser_cookie_name(store), value=value, path="/", httponly=True,
                  secure=store.secure, samesite="lax", max_age=max_age)


async def _signed_in(request: Request, state: State, caller: Caller, name: str,
                     return_to: str) -> Redirect:
    """A fresh session for `caller`, replacing whatever session this browser held."""
    store: SessionStore = state.sessions
    async with state.identity_pool.connection() as aconn:
        await store.end(aconn, request.cookies.get(store.cookie_name))
        session_id = await store.create(aconn, caller, name)
    return Redirect(return_to, status_code=HTTP_303_SEE_OTHER,
                    cookies=[store.cookie(session_id), _browser_cookie(store, "", 0)])


def _limit_by_address(request: Request, state: State) -> None:
    """Sign-in requests come before any identity, and each writes a row: bound them by the
    client's address (behind a proxy of KB_TRUSTED_PROXIES, the one its X-Forwarded-For names),
    with the callers' limits (KB_RATE_LIMIT_*)."""
    state.rate_limiter.check(f"address:{request.client.host if request.client else '?'}")


class SignInController(Controller):
    path = "/auth"
    include_in_schema = False
    exception_handlers = {ServiceError: sign_in_refused}

    @get("/login", operation_id="sign_in")
    async def login(self, request: Request, state: State, return_to: str = "/") -> Redirect:
        """Send the browser to the company's provider (or sign the development user in)."""
        _limit_by_address(request, state)
        if not is_relative_target(return_to):
            raise ServiceError("return_to must be a path on this site", code="invalid_return_to")
        if state.dev_user is not None:
            return await _signed_in(request, state, state.dev_user, state.dev_user.subject,
                                    return_to)
        if state.oidc is None:
            raise ServiceError("sign-in is not configured (KB_OIDC_CLIENT_ID)",
                               code="sign_in_not_configured")
        try:
            attempt = await state.oidc.start(state.identity_pool, return_to)
        except SignInError as exc:
            raise ServiceError(exc.reason, code="sign_in_failed") from None
        return Redirect(attempt.url, status_code=HTTP_303_SEE_OTHER,
                        cookies=[_browser_cookie(state.sessions, attempt.browser,
                                                 ATTEMPT_VALID_S)])

    @get("/callback", operation_id="sign_in_callback")
    async def callback(self, request: Request, state: State, code: str | None = None,
                       error: str | None = None) -> Redirect:
        """The provider's answer: a code for this browser's sign-in, or an error."""
        _limit_by_address(request, state)
        # `state` is the protocol's name for it, and Litestar's for the application state.
        oidc_state = request.query_params.get("state")
        if state.oidc is None or not oidc_state:
            raise ServiceError("no sign-in in progress", code="sign_in_failed")
        if error or not code:
            # Used up all the same, so that the answer cannot be replayed. The page shows a
            # fixed sentence: anyone can send a browser here with an `error` of their wording.
            await state.oidc.discard(state.identity_pool, oidc_state)
            log.warning("the identity provider refused a sign-in: %r", (error or "no code")[:200])
            raise ServiceError("the identity provider refused the sign-in",
                               code="sign_in_failed")
        try:
            browser = request.cookies.get(_browser_cookie_name(state.sessions))
            caller, name, return_to = await state.oidc.finish(
                state.identity_pool, oidc_state, code, browser)
        except SignInError as exc:
            raise ServiceError(exc.reason, code="sign_in_failed") from None
        return await _signed_in(request, state, caller, name, return_to)

    @post("/logout", operation_id="sign_out", status_code=HTTP_204_NO_CONTENT,
          dependencies={"session": Provide(provide_session)})
    async def logout(self, request: Request, state: State,
                     session: WebSession | None) -> Response[None]:
        """End this browser's session (a live one needs its CSRF token); the cookie of one
        that has already ended is cleared all the same."""
        store: SessionStore = state.sessions
        if session is not None:
            session_caller(request, session)  # 403 without the CSRF token
            async with state.identity_pool.connection() as aconn:
                await store.end(aconn, request.cookies.get(store.cookie_name))
        return Response(None, status_code=HTTP_204_NO_CONTENT, cookies=[store.cleared()])
