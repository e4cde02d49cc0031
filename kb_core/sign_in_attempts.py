"""The page's sign-ins in flight, in the `sign_in_attempts` table: an authorization request
sent to the company's OpenID Connect provider and not yet answered. A row is found by the
SHA-256 of its `state`, taken (deleted) when the answer arrives so a state works once, and
binds the sign-in to the browser whose cookie's hash it records. The query service speaks to
the provider; this module keeps the rows."""

from __future__ import annotations

import hmac

import msgspec
import psycopg
from psycopg.rows import class_row

from kb_core.api_tokens import hash_token
from kb_core.queries import query

__all__ = [
    "ATTEMPT_VALID_S",
    "StoredSignInAttempt",
    "create_sign_in_attempt",
    "purge_sign_in_attempts",
    "take_sign_in_attempt",
]

ATTEMPT_VALID_S = 600  # a sign-in must come back from the provider within ten minutes


class StoredSignInAttempt(msgspec.Struct, frozen=True):
    """A sign-in taken back from the table: what the provider's answer is checked against."""

    browser_hash: str
    nonce: str
    code_verifier: str
    return_to: str
    fresh: bool  # younger than ATTEMPT_VALID_S when it was taken

    def started_by(self, browser: str | None) -> bool:
        """Whether `browser` (its cookie's value) is the browser that started this sign-in."""
        if not browser:
            return False
        # Constant time: the cookie is the caller's to choose, byte by byte.
        return hmac.compare_digest(self.browser_hash, hash_token(browser))


async def create_sign_in_attempt(aconn: psycopg.AsyncConnection, *, state: str, browser: str,
                                 nonce: str, code_verifier: str, return_to: str) -> None:
    """Record a sign-in sent to the provider; `state` and `browser` are stored as hashes."""
    await aconn.execute(query("create_sign_in_attempt"), {
        "state_hash": hash_token(state), "browser_hash": hash_token(browser),
        "nonce": nonce, "code_verifier": code_verifier, "return_to": return_to})


async def take_sign_in_attempt(aconn: psycopg.AsyncConnection,
                               state: str) -> StoredSignInAttempt | None:
    """Delete the sign-in with this `state` and return it; None for an unknown or already used
    one. Stale ones are returned too (`fresh` is False), so that they are used up as well."""
    async with aconn.cursor(row_factory=class_row(StoredSignInAttempt)) as cur:
        await cur.execute(query("take_sign_in_attempt"),
                          {"state_hash": hash_token(state), "valid_s": ATTEMPT_VALID_S})
        return await cur.fetchone()


async def purge_sign_in_attempts(aconn: psycopg.AsyncConnection) -> int:
    """Delete the sign-ins that can no longer finish; returns how many."""
    cur = await aconn.execute(query("purge_sign_in_attempts"), {"valid_s": ATTEMPT_VALID_S})
    return cur.rowcount
