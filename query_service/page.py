"""The employee page at `/`: one HTML page in Japanese, its own CSS and JavaScript served from
/static, nothing fetched from another host and nothing to build. Signed in, it asks through
`POST /v1/ask` with the session cookie and the session's CSRF token."""

from __future__ import annotations

import html
import string
from pathlib import Path

from litestar import Request, Response, Router, get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.static_files import create_static_files_router

from query_service.dependencies import provide_session
from query_service.errors import EXCEPTION_HANDLERS, ServiceError
from query_service.guards import is_reviewer
from query_service.sessions import WebSession

__all__ = ["page", "sign_in_refused", "static_files"]

HERE = Path(__file__).parent
_TEMPLATE = string.Template((HERE / "page.html").read_text(encoding="utf-8"))
_REFUSED = string.Template((HERE / "sign_in_refused.html").read_text(encoding="utf-8"))

# The page runs only its own script: no inline script, no other origin, no framing.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",  # it carries the CSRF token and the user's name
}


def _sign_in_help(state: State) -> str:
    if state.dev_user is not None or state.oidc is not None:
        return ""
    return ("<p>サインインが設定されていません。管理者の方は、会社の OpenID Connect プロバイダーを"
            "<code>KB_JWT_ISSUER</code>・<code>KB_JWT_JWKS</code>・<code>KB_OIDC_CLIENT_ID</code>・"
            "<code>KB_PUBLIC_URL</code> で設定してください（docs/employee-page.md）。"
            "手元で試すだけなら <code>kb serve --dev-user 名前 --groups グループ</code> で"
            "開発用サインインが使えます。</p>")


def _dev_banner(state: State) -> str:
    user = state.dev_user
    if user is None:
        return ""
    groups = html.escape(", ".join(user.groups))
    return (f'<div class="dev-banner" role="status">開発用サインイン：{html.escape(user.subject)}'
            f"（グループ: {groups}）。本番環境では使用しないでください。</div>")


@get("/", include_in_schema=False, dependencies={"session": Provide(provide_session)})
async def page(state: State, session: WebSession | None) -> Response[str]:
    """The employee page: the question box when signed in, else the way to sign in."""
    body = _TEMPLATE.substitute(
        dev_banner=_dev_banner(state),
        signed_in="true" if session else "false",
        csrf_token=html.escape(session.csrf_token if session else ""),
        user_name=html.escape(session.display_name if session else ""),
        user_groups=html.escape(", ".join(session.caller.groups) if session else ""),
        sign_in_available="true" if state.dev_user or state.oidc else "false",
        reviewer="true" if session and is_reviewer(session.caller, state) else "false",
        sign_in_help=_sign_in_help(state),
    )
    return Response(body, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


def sign_in_refused(request: Request, exc: ServiceError) -> Response:
    """A refused sign-in as a page for a browser (which asks for HTML), else the JSON error
    body every other client gets."""
    if exc.status_code != 400 or "text/html" not in request.headers.get("accept", ""):
        return EXCEPTION_HANDLERS[ServiceError](request, exc)
    body = _REFUSED.substitute(dev_banner=_dev_banner(request.app.state),
                               detail=html.escape(exc.detail), code=html.escape(exc.code))
    return Response(body, status_code=exc.status_code, media_type="text/html; charset=utf-8",
                    headers=PAGE_HEADERS)


def _nosniff(response: Response) -> Response:
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


static_files: Router = create_static_files_router(
    path="/static", directories=[HERE / "static"], after_request=_nosniff)
