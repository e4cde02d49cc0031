"""API tokens for apps, in the `api_tokens` table: made by `kb token create`, stored as a SHA-256
hash, verified by the query service on every request. A token is shown once and never logged."""

from __future__ import annotations

import builtins
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from kb_core.callers import Caller
from kb_core.database import connect
from kb_core.queries import query

__all__ = [
    "MAX_CREDENTIAL_CHARS",
    "TOKEN_PREFIX",
    "TokenNameTakenError",
    "TokenStore",
    "create_token",
    "hash_token",
    "list_tokens",
    "new_token",
    "revoke_token",
]

TOKEN_PREFIX = "kb_"
_LISTED_PREFIX_CHARS = 8
MAX_CREDENTIAL_CHARS = 16_384  # far above any real token; bounds the work a request can cause


class TokenNameTakenError(ValueError):
    """A live API token already has this name."""


def new_token() -> str:
    """A new API token: `kb_` and 32 random bytes, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The SHA-256 hex digest stored for a token (a fast hash suffices for 256 random bits)."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """API tokens for apps in the `api_tokens` table."""

    @staticmethod
    def create(conn: psycopg.Connection, name: str, groups: Sequence[str]) -> str:
        """Store a new token for `name` and return it: the only time it is ever shown."""
        name = name.strip()
        clean_groups = list(dict.fromkeys(g.strip() for g in groups if g.strip()))
        if not name:
            raise ValueError("a token needs a name")
        if not clean_groups:
            raise ValueError("a token needs at least one group")
        token = new_token()
        params = {"name": name, "token_hash": hash_token(token),
                  "prefix": token[:_LISTED_PREFIX_CHARS], "groups": clean_groups}
        try:
            with conn.transaction():
                conn.execute(query("create_api_token"), params)
        except psycopg.errors.UniqueViolation:
            # token_hash cannot collide (256 random bits): the live-name index did.
            raise TokenNameTakenError(f"a live token named {name!r} already exists") from None
        return token

    @staticmethod
    def revoke(conn: psycopg.Connection, name: str) -> bool:
        """Revoke the live token of that name; False when there is none."""
        with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(query("revoke_api_token"), {"name": name}).fetchone()
        return bool(row and row["revoked"])

    @staticmethod
    async def verify(aconn: psycopg.AsyncConnection, token: str) -> Caller | None:
        """The app holding this token, or None for an unknown or revoked one."""
        if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_CREDENTIAL_CHARS:
            return None
        digest = hash_token(token)
        async with aconn.transaction(), aconn.cursor(row_factory=dict_row) as cur:
            # The index lookup compares hashes, which a caller cannot steer byte by byte; the
            # constant-time comparison below confirms the match regardless.
            await cur.execute(query("api_token_by_hash"), {"token_hash": digest})
            row = await cur.fetchone()
            if row is None or not hmac.compare_digest(row["token_hash"], digest):
                return None
            if row["touch_due"]:
                await cur.execute(query("touch_api_token"), {"id": row["id"]})
        return Caller(kind="token", subject=row["name"], groups=tuple(row["groups"]))

    @staticmethod
    def list(conn: psycopg.Connection) -> builtins.list[dict[str, Any]]:
        """Every token, revoked ones included: name, prefix, groups, dates; never the hash."""
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(query("list_api_tokens")).fetchall()


# For a door (`kb token`), which holds no connection of its own: each opens one for its call.

def create_token(database_url: str, name: str, groups: Sequence[str]) -> str:
    """TokenStore.create on a connection of its own: the new token, shown this once."""
    with connect(database_url) as conn:
        return TokenStore.create(conn, name, groups)


def list_tokens(database_url: str) -> list[dict[str, Any]]:
    """TokenStore.list on a connection of its own: every token, never a hash."""
    with connect(database_url) as conn:
        return TokenStore.list(conn)


def revoke_token(database_url: str, name: str) -> bool:
    """TokenStore.revoke on a connection of its own: False when no live token has `name`."""
    with connect(database_url) as conn:
        return TokenStore.revoke(conn, name)
