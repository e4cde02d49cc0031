"""Signing in to the page and out of it: the company's OpenID Connect provider (oidc.py), or the
development sign-in of `kb serve --dev-user`, which names one user and its groups on the
command line. Either way a new session id is issued at sign-in (sessions.py). Browser routes,
kept out of the API's OpenAPI document."""

from __future__ import annotations

from litestar import Controller, Request, get, post
from litestar.datastructures import Cookie, State
from litestar.di import Provide
from litestar.response import Redirect, Response
from litestar.status_codes import HTTP_204_NO_CONTENT, HTTP_303_SEE_OTHER

from kb_core.callers import Caller
from query_service.api import provide_caller
from query_service.errors import ServiceError
from query_service.oidc import ATTEMPT_VALID_S, SignInError, is_relative_target
from query_service.page import sign_in_refused
from query_service.sessions import SessionStore

__all__ = ["SignInController"]

BROWSER_COOKIE = "kb_signin"  # binds a sign-in's `state` to the browser that started it


def _browser_cookie(store: SessionStore, value: str, max_age: int) -> Cookie:
    # Lax: the provider sends the browser back with a top-level GET, which carries it.
    return Cookie(key=BROWSER_COOKIE, value=value, path="/auth", httponly=True,
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
    client's address, with the callers' limits (KB_RATE_LIMIT_*)."""
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
            # Used up all the same, so that the answer cannot be replayed.
            await state.oidc.discard(state.identity_pool, oidc_state)
            raise ServiceError(f"the provider answered {(error or 'no code')[:64]!r}",
                               code="sign_in_failed")
        try:
            caller, name, return_to = await state.oidc.finish(
                state.identity_pool, oidc_state, code, request.cookies.get(BROWSER_COOKIE))
        except SignInError as exc:
            raise ServiceError(exc.reason, code="sign_in_failed") from None
        return await _signed_in(request, state, caller, name, return_to)

    @post("/logout", operation_id="sign_out", status_code=HTTP_204_NO_CONTENT,
          dependencies={"caller": Provide(provide_caller)})
    async def logout(self, request: Request, state: State, caller: Caller) -> Response[None]:
        """End this browser's session (the CSRF token is checked with the caller)."""
        store: SessionStore = state.sessions
        async with state.identity_pool.connection() as aconn:
            await store.end(aconn, request.cookies.get(store.cookie_name))
        return Response(None, status_code=HTTP_204_NO_CONTENT, cookies=[store.cleared()])
