"""The employee page's sessions, kept in PostgreSQL: a random id in an HttpOnly cookie, stored
only as its SHA-256; a new id at every sign-in; an idle and an absolute limit; a CSRF token per
session that every state-changing request made with the cookie must repeat. The rows are
kb_core/web_sessions.py's; the cookie is this module's."""

from __future__ import annotations

import psycopg
from litestar.datastructures import Cookie

from kb_core.callers import Caller
from kb_core.settings import ServiceSettings
from kb_core.web_sessions import (
    WebSession,
    create_web_session,
    delete_web_session,
    find_web_session,
    purge_web_sessions,
)

__all__ = ["CSRF_HEADER", "SessionStore", "WebSession"]

CSRF_HEADER = "X-CSRF-Token"


class SessionStore:
    """Sessions and the cookie that carries them. `secure` comes from the configured public URL,
    never from the request: behind a TLS-terminating proxy the service itself sees http."""

    def __init__(self, *, secure: bool, idle_s: int, max_s: int, dev_sign_in: bool) -> None:
        self.secure = secure
        self.idle_s = idle_s
        self.max_s = max_s
        # Development sessions are honoured only while this is on (kb_core/web_sessions.py).
        self.dev_sign_in = dev_sign_in
        # __Host-: a browser keeps such a cookie only if it is Secure, has Path=/ and no Domain,
        # so a sibling subdomain cannot plant one.
        self.cookie_name = "__Host-kb_session" if secure else "kb_session"

    @classmethod
    def from_settings(cls, settings: ServiceSettings, *, dev_sign_in: bool) -> SessionStore:
        return cls(secure=settings.public_url.startswith("https://"),
                   idle_s=settings.session_idle_s, max_s=settings.session_max_s,
                   dev_sign_in=dev_sign_in)

    async def create(self, aconn: psycopg.AsyncConnection, caller: Caller,
                     display_name: str) -> str:
        """A new session for `caller`; returns the cookie's value, which is stored nowhere."""
        return await create_web_session(aconn, caller, display_name, max_s=self.max_s)

    async def find(self, aconn: psycopg.AsyncConnection, session_id: str) -> WebSession | None:
        """The live session with this id; None for an unknown, forged or expired one."""
        return await find_web_session(aconn, session_id, idle_s=self.idle_s,
                                      dev_sign_in=self.dev_sign_in)

    async def end(self, aconn: psycopg.AsyncConnection, session_id: str | None) -> None:
        """Forget the session (sign-out, or the one replaced at sign-in)."""
        if session_id:
            await delete_web_session(aconn, session_id)

    async def purge(self, aconn: psycopg.AsyncConnection) -> int:
        """Delete the sessions past their limits, and the development ones when the
        development sign-in is off; returns how many."""
        return await purge_web_sessions(aconn, idle_s=self.idle_s, dev_sign_in=self.dev_sign_in)

    def cookie(self, session_id: str) -> Cookie:
        # No Max-Age: the browser forgets it when it closes; the server's limits decide anyway.
        return Cookie(key=self.cookie_name, value=session_id, path="/", httponly=True,
                      secure=self.secure, samesite="lax")

    def cleared(self) -> Cookie:
        return Cookie(key=self.cookie_name, value="", path="/", httponly=True,
                      secure=self.secure, samesite="lax", max_age=0)
