"""The employee page's sessions, kept in PostgreSQL: a random id in an HttpOnly cookie, stored
only as its SHA-256; a new id at every sign-in; an idle and an absolute limit; a CSRF token per
session that every state-changing request made with the cookie must repeat."""

from __future__ import annotations

import secrets

import msgspec
import psycopg
from litestar.datastructures import Cookie
from psycopg.rows import dict_row

from kb_core.api_tokens import hash_token
from kb_core.callers import Caller
from kb_core.queries import query
from kb_core.settings import ServiceSettings

__all__ = ["CSRF_HEADER", "SessionStore", "WebSession"]

CSRF_HEADER = "X-CSRF-Token"


class WebSession(msgspec.Struct, frozen=True):
    caller: Caller
    display_name: str
    csrf_token: str


class SessionStore:
    """Sessions and the cookie that carries them. `secure` comes from the configured public URL,
    never from the request: behind a TLS-terminating proxy the service itself sees http."""

    def __init__(self, *, secure: bool, idle_s: int, max_s: int, dev_sign_in: bool) -> None:
        self.secure = secure
        self.idle_s = idle_s
        self.max_s = max_s
        # A development session names a user nobody verified: it is honoured only while the
        # service runs with `--dev-user`, never after a restart without it.
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
        session_id = secrets.token_urlsafe(32)
        await aconn.execute(query("create_web_session"), {
            "id_hash": hash_token(session_id), "caller_kind": caller.kind,
            "subject": caller.subject, "display_name": display_name,
            "groups": list(caller.groups), "csrf_token": secrets.token_urlsafe(32),
            "max_s": self.max_s})
        return session_id

    async def find(self, aconn: psycopg.AsyncConnection, session_id: str) -> WebSession | None:
        """The live session with this id; None for an unknown, forged or expired one."""
        if not session_id or len(session_id) > 256:
            return None
        async with aconn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query("web_session"),
                              {"id_hash": hash_token(session_id), "idle_s": self.idle_s})
            row = await cur.fetchone()
        if row is None or (row["caller_kind"] == "dev" and not self.dev_sign_in):
            return None
        caller = Caller(kind=row["caller_kind"], subject=row["subject"],
                        groups=tuple(row["groups"]))
        return WebSession(caller, row["display_name"], row["csrf_token"])

    async def end(self, aconn: psycopg.AsyncConnection, session_id: str | None) -> None:
        """Forget the session (sign-out, or the one replaced at sign-in)."""
        if session_id:
            await aconn.execute(query("delete_web_session"), {"id_hash": hash_token(session_id)})

    async def purge(self, aconn: psycopg.AsyncConnection) -> int:
        """Delete the sessions past their limits, and the development ones when the
        development sign-in is off; returns how many."""
        cur = await aconn.execute(query("purge_web_sessions"),
                                  {"idle_s": self.idle_s, "dev_sign_in": self.dev_sign_in})
        return cur.rowcount

    def cookie(self, session_id: str) -> Cookie:
        # No Max-Age: the browser forgets it when it closes; the server's limits decide anyway.
        return Cookie(key=self.cookie_name, value=session_id, path="/", httponly=True,
                      secure=self.secure, samesite="lax")

    def cleared(self) -> Cookie:
        return Cookie(key=self.cookie_name, value="", path="/", httponly=True,
                      secure=self.secure, samesite="lax", max_age=0)
