"""The employee page's sessions, in the `web_sessions` table: a row per signed-in browser,
found by the SHA-256 of the cookie's value (so the table holds nothing a reader could present
as a cookie), with an idle and an absolute limit and the CSRF token its requests repeat. The
query service keeps the cookie; this module keeps the rows."""

from __future__ import annotations

import secrets

import msgspec
import psycopg
from psycopg.rows import dict_row

from kb_core.api_tokens import hash_token
from kb_core.callers import Caller
from kb_core.queries import query

__all__ = [
    "WebSession",
    "create_web_session",
    "delete_web_session",
    "find_web_session",
    "purge_web_sessions",
]

_MAX_SESSION_ID_CHARS = 256  # a real id has 43; a longer cookie is forged, not looked up


class WebSession(msgspec.Struct, frozen=True):
    """A live session: who signed in, the name to show them, and their CSRF token."""

    caller: Caller
    display_name: str
    csrf_token: str


async def create_web_session(aconn: psycopg.AsyncConnection, caller: Caller, display_name: str,
                             *, max_s: int) -> str:
    """Store a new session for `caller`, ending `max_s` from now; returns its id, the cookie's
    value, which is stored nowhere."""
    session_id = secrets.token_urlsafe(32)
    await aconn.execute(query("create_web_session"), {
        "id_hash": hash_token(session_id), "caller_kind": caller.kind,
        "subject": caller.subject, "display_name": display_name,
        "groups": list(caller.groups), "csrf_token": secrets.token_urlsafe(32),
        "max_s": max_s})
    return session_id


async def find_web_session(aconn: psycopg.AsyncConnection, session_id: str, *, idle_s: int,
                           dev_sign_in: bool) -> WebSession | None:
    """The live session with this id; None for an unknown, forged or expired one, or for a
    development one while the development sign-in is off."""
    if not session_id or len(session_id) > _MAX_SESSION_ID_CHARS:
        return None
    async with aconn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query("web_session"),
                          {"id_hash": hash_token(session_id), "idle_s": idle_s})
        row = await cur.fetchone()
    # A development session names a user nobody verified: it is honoured only while the
    # service runs with `--dev-user`, never after a restart without it.
    if row is None or (row["caller_kind"] == "dev" and not dev_sign_in):
        return None
    caller = Caller(kind=row["caller_kind"], subject=row["subject"], groups=tuple(row["groups"]))
    return WebSession(caller, row["display_name"], row["csrf_token"])


async def delete_web_session(aconn: psycopg.AsyncConnection, session_id: str) -> None:
    """Delete the session with this id, if there is one."""
    await aconn.execute(query("delete_web_session"), {"id_hash": hash_token(session_id)})


async def purge_web_sessions(aconn: psycopg.AsyncConnection, *, idle_s: int,
                             dev_sign_in: bool) -> int:
    """Delete the sessions past their limits, and the development ones when the development
    sign-in is off; returns how many."""
    cur = await aconn.execute(query("purge_web_sessions"),
                              {"idle_s": idle_s, "dev_sign_in": dev_sign_in})
    return cur.rowcount
