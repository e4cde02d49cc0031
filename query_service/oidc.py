"""The page's sign-in with the company's OpenID Connect provider: the authorization-code flow
with PKCE (S256), a `state` that is single-use and bound to the browser that started the
sign-in, and a `nonce` the ID token must carry. The ID token is verified by the same
JwtVerifier (issuer, keys, groups claim) as bearer JWTs, against this client's id."""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
import time
import urllib.parse

import httpx
import msgspec
from psycopg_pool import AsyncConnectionPool

from kb_core.callers import Caller
from kb_core.settings import ServiceSettings
from kb_core.sign_in_attempts import (
    ATTEMPT_VALID_S,
    create_sign_in_attempt,
    purge_sign_in_attempts,
    take_sign_in_attempt,
)
from query_service.identity import IdentityError, JwtVerifier

__all__ = [
    "ATTEMPT_VALID_S",
    "OidcProvider",
    "SignInAttempt",
    "SignInError",
    "is_relative_target",
    "purge_sign_in_attempts",
]

log = logging.getLogger(__name__)

DISCOVERY_CACHE_S = 3600


class SignInError(Exception):
    """The sign-in failed; `reason` is short and holds no secret."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SignInAttempt(msgspec.Struct, frozen=True):
    """Where the browser is sent at the provider; `browser` goes in its cookie."""

    browser: str
    url: str


class _Metadata(msgspec.Struct, frozen=True):
    issuer: str
    authorization_endpoint: str
    token_endpoint: str


def is_relative_target(target: str) -> bool:
    """Whether `target` is a path on this site: never another host (`//evil`, `/\\evil`,
    `https://evil`), so a sign-in link cannot send anyone elsewhere."""
    if not target.startswith("/") or target.startswith(("//", "/\\")) or len(target) > 2000:
        return False
    parts = urllib.parse.urlsplit(target)
    return not (parts.scheme or parts.netloc or any(ord(c) < 0x20 or c == "\\" for c in target))


def _pkce_challenge(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(
        b"=").decode()


class OidcProvider:
    """The company's provider, as KB_JWT_ISSUER's discovery document describes it."""

    def __init__(self, settings: ServiceSettings, verifier: JwtVerifier,
                 timeout_s: float = 10) -> None:
        self.issuer = settings.jwt_issuer
        self.client_id = settings.oidc_client_id
        self.client_secret = settings.oidc_client_secret
        self.redirect_uri = f"{settings.public_url}/auth/callback"
        self.verifier = verifier
        self.timeout_s = timeout_s
        self._metadata: _Metadata | None = None
        self._fetched_at = 0.0

    @classmethod
    def from_settings(cls, settings: ServiceSettings,
                      verifier: JwtVerifier | None) -> OidcProvider | None:
        """The provider where the page's sign-in is configured (KB_OIDC_CLIENT_ID)."""
        if not settings.oidc_client_id or verifier is None:
            return None
        return cls(settings, verifier)

    async def metadata(self) -> _Metadata:
        if self._metadata is None or time.monotonic() - self._fetched_at > DISCOVERY_CACHE_S:
            url = f"{self.issuer.rstrip('/')}/.well-known/openid-configuration"
            try:
                async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                    response = await client.get(url, headers={"Accept": "application/json"})
                    response.raise_for_status()
                metadata = msgspec.convert(response.json(), _Metadata)
            except (httpx.HTTPError, ValueError, msgspec.ValidationError) as exc:
                log.warning("OIDC discovery at %s failed: %s", url, exc)
                raise SignInError("the identity provider is unreachable") from None
            # The discovery document must speak for the configured issuer (OIDC Discovery 4.3).
            if metadata.issuer != self.issuer:
                raise SignInError("the provider's discovery document names another issuer")
            self._metadata, self._fetched_at = metadata, time.monotonic()
        return self._metadata

    # Each method below takes a connection only around its own queries, never across a call to
    # the provider: the identity pool is small and authenticates every API request, so a slow
    # provider holding connections would starve them all (and read as "database down").

    async def start(self, pool: AsyncConnectionPool, return_to: str) -> SignInAttempt:
        """Record a new sign-in and return where to send the browser; `return_to` is a
        relative target (`is_relative_target`)."""
        metadata = await self.metadata()
        state, browser = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        nonce, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(64)
        async with pool.connection() as aconn:
            # Also here, not only in the daily purge: sign-ins need no identity, so the table
            # stays as small as ten minutes of them.
            await purge_sign_in_attempts(aconn)
            await create_sign_in_attempt(aconn, state=state, browser=browser, nonce=nonce,
                                         code_verifier=verifier, return_to=return_to)
        params = {"response_type": "code", "client_id": self.client_id,
                  "redirect_uri": self.redirect_uri, "scope": "openid profile email",
                  "state": state, "nonce": nonce, "code_challenge": _pkce_challenge(verifier),
                  "code_challenge_method": "S256"}
        separator = "&" if "?" in metadata.authorization_endpoint else "?"
        url = metadata.authorization_endpoint + separator + urllib.parse.urlencode(params)
        return SignInAttempt(browser=browser, url=url)

    async def finish(self, pool: AsyncConnectionPool, state: str, code: str,
                     browser: str | None) -> tuple[Caller, str, str]:
        """The verified employee, a name to show and the path to return to, for the
        provider's answer to a sign-in this browser started; SignInError otherwise."""
        # Committed as the connection goes back: a state is used up even when what follows
        # fails.
        async with pool.connection() as aconn:
            attempt = await take_sign_in_attempt(aconn, state)
        if attempt is None:
            raise SignInError("unknown or already used sign-in state")
        if not attempt.started_by(browser):
            raise SignInError("the sign-in was started in another browser")
        if not attempt.fresh:
            raise SignInError("the sign-in took too long; start again")
        id_token = await self._exchange(code, attempt.code_verifier)
        try:
            caller, name = await self.verifier.verify_id_token_async(
                id_token, self.client_id, attempt.nonce)
        except IdentityError as exc:
            raise SignInError(f"ID token refused: {exc.reason}") from None
        return caller, name, attempt.return_to

    async def discard(self, pool: AsyncConnectionPool, state: str) -> None:
        """Use up a sign-in the provider answered with an error."""
        async with pool.connection() as aconn:
            await take_sign_in_attempt(aconn, state)

    async def _exchange(self, code: str, code_verifier: str) -> str:
        metadata = await self.metadata()
        form = {"grant_type": "authorization_code", "code": code,
                "redirect_uri": self.redirect_uri, "client_id": self.client_id,
                "code_verifier": code_verifier}
        auth = (self.client_id, self.client_secret) if self.client_secret else None
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                response = await client.post(metadata.token_endpoint, data=form, auth=auth,
                                             headers={"Accept": "application/json"})
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("OIDC token request failed: %s", exc)
            raise SignInError("the identity provider is unreachable") from None
        if response.status_code != 200 or not isinstance(body, dict):
            error = body.get("error") if isinstance(body, dict) else None
            raise SignInError(f"the provider refused the code ({str(error)[:64]})")
        id_token = body.get("id_token")
        if not isinstance(id_token, str):
            raise SignInError("the provider returned no ID token")
        return id_token
