"""Who is calling the query service, verified on every request.

Two kinds of caller: apps, with a bearer API token made by `kb token create` (stored as a
SHA-256 hash), and employees, with a JWT from the company's identity provider (OIDC). Either
way the verified identity alone decides the caller's groups. Tokens are never logged, and no
error message carries one.
"""

from __future__ import annotations

import builtins
import hmac
import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import anyio.to_thread
import httpx
import jwt
import msgspec
import psycopg

from kb_core.api_tokens import MAX_CREDENTIAL_CHARS, TOKEN_PREFIX, TokenStore
from kb_core.callers import Caller
from kb_core.settings import ServiceSettings

__all__ = [
    "IdentityError",
    "JwtSettings",
    "JwtVerifier",
    "identify",
]

log = logging.getLogger(__name__)



class IdentityError(Exception):
    """The caller could not be verified; `reason` is short and never contains a secret."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# Asymmetric algorithms only, each with the key type (and curve) that may verify it: a public key
# is public, so an HMAC "secret" made from it (alg confusion) or "none" must never pass.
_KEY_FOR_ALGORITHM: dict[str, tuple[str, str | None]] = {
    "RS256": ("RSA", None), "RS384": ("RSA", None), "RS512": ("RSA", None),
    "PS256": ("RSA", None), "PS384": ("RSA", None), "PS512": ("RSA", None),
    "ES256": ("EC", "P-256"), "ES384": ("EC", "P-384"), "ES512": ("EC", "P-521"),
    "EdDSA": ("OKP", None),
}


class JwtSettings(msgspec.Struct, frozen=True):
    """How employees' JWTs are verified; `jwks` is a file path or an http(s) URL."""

    issuer: str
    audience: str
    jwks: str
    groups_claim: str = "groups"
    leeway_s: int = 30
    algorithms: tuple[str, ...] = ("RS256", "ES256")

    def __post_init__(self) -> None:
        unsupported = [a for a in self.algorithms if a not in _KEY_FOR_ALGORITHM]
        if unsupported or not self.algorithms:
            raise ValueError(f"JWT algorithms must be asymmetric ones from "
                             f"{sorted(_KEY_FOR_ALGORITHM)}, not {unsupported}")

    @classmethod
    def from_settings(cls, settings: ServiceSettings) -> JwtSettings | None:
        """The configured verification (KB_JWT_*); None when JWT sign-in is off."""
        if not settings.jwt_issuer:
            return None
        return cls(issuer=settings.jwt_issuer, audience=settings.jwt_audience,
                   jwks=settings.jwt_jwks, groups_claim=settings.jwt_groups_claim)


class _SigningKey(NamedTuple):
    kid: str | None
    kty: str
    crv: str | None
    alg: str | None  # the JWK's own "alg", when it pins one
    public_key: Any  # a cryptography public key

    def fits(self, alg: str) -> bool:
        kty, crv = _KEY_FOR_ALGORITHM[alg]
        return self.kty == kty and crv in (None, self.crv) and self.alg in (None, alg)


def _signing_keys(document: object) -> builtins.list[_SigningKey]:
    """The public signature keys of a JWKS document; symmetric and private keys are skipped."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), builtins.list):
        raise ValueError("not a JWKS document (no 'keys' list)")
    keys = []
    for jwk in document["keys"]:
        if not isinstance(jwk, dict):
            continue
        kid = jwk.get("kid")
        public = jwk.get("kty") in ("RSA", "EC", "OKP") and "d" not in jwk
        if not public or jwk.get("use", "sig") != "sig":
            log.warning("JWKS key %r skipped: not a public signature key", kid)
            continue
        try:
            public_key = jwt.PyJWK(jwk).key
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            log.warning("JWKS key %r skipped: %s", kid, exc)
            continue
        keys.append(_SigningKey(kid if isinstance(kid, str) else None, jwk["kty"],
                                jwk.get("crv"), jwk.get("alg"), public_key))
    return keys


# Fixed reasons for PyJWT's errors, most specific first; nothing of the token is repeated.
_JWT_ERRORS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "token expired"),
    (jwt.ImmatureSignatureError, "token not yet valid"),
    (jwt.InvalidIssuerError, "wrong issuer"),
    (jwt.InvalidAudienceError, "wrong audience"),
    (jwt.InvalidSignatureError, "bad signature"),
    (jwt.InvalidAlgorithmError, "algorithm not allowed"),
    (jwt.DecodeError, "malformed token"),
    (jwt.PyJWTError, "invalid token"),
)


class JwtVerifier:
    """Verifies employees' JWTs against the identity provider's signing keys (JWKS).

    Keys are cached for `cache_s`; a token signed with an unknown key id triggers a refetch, at
    most once every `refetch_min_s`, so rotated keys are picked up and junk key ids cost nothing.
    When a refetch fails, the keys already known stay in use.
    """

    def __init__(self, settings: JwtSettings, *, cache_s: float = 300, refetch_min_s: float = 60,
                 timeout_s: float = 5, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._cache_s = cache_s
        self._refetch_min_s = refetch_min_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._url = settings.jwks if settings.jwks.startswith(("https://", "http://")) else None
        if self._url and self._url.startswith("http://"):
            host = urllib.parse.urlsplit(self._url).hostname or ""
            if host not in ("127.0.0.1", "localhost", "::1"):
                log.warning("JWKS fetched over plain http from %s: use https", host)
        self._keys: builtins.list[_SigningKey] = []
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._lock = threading.Lock()

    def verify(self, token: str) -> Caller:
        """The employee this JWT names, with its groups; IdentityError when it does not verify.
        May block on a JWKS fetch: from async code use `verify_async`."""
        alg, kid = self._header(token)
        return self._caller(self._decode(token, alg, self._key_or_fetch(kid),
                                         self.settings.audience))

    async def verify_async(self, token: str) -> Caller:
        """`verify`, with any JWKS fetch moved off the event loop."""
        return self._caller(await self._claims_async(token, self.settings.audience))

    async def verify_id_token_async(self, token: str, client_id: str,
                                    nonce: str) -> tuple[Caller, str]:
        """The employee an OpenID Connect ID token names, and a name to show: verified as a
        bearer JWT is (keys, issuer, expiry, groups claim), but addressed to this service's
        client id and carrying the nonce of the sign-in it answers."""
        claims = await self._claims_async(token, client_id)
        # A token for several audiences must name this client as the party it was issued to,
        # and one that names a party at all must name this client (OpenID Connect Core 3.1.3.7).
        audiences = claims["aud"] if isinstance(claims["aud"], builtins.list) else [claims["aud"]]
        if (len(audiences) > 1 or "azp" in claims) and claims.get("azp") != client_id:
            raise IdentityError("token issued to another party")
        sent = claims.get("nonce")
        if not isinstance(sent, str) or not hmac.compare_digest(sent, nonce):
            raise IdentityError("nonce does not match the sign-in")
        caller = self._caller(claims)
        name = next((claims[k] for k in ("name", "preferred_username", "email")
                     if isinstance(claims.get(k), str) and claims[k].strip()), caller.subject)
        return caller, name

    async def _claims_async(self, token: str, audience: str) -> dict[str, Any]:
        alg, kid = self._header(token)
        key = self._cached_key(kid)
        if key is None:
            key = await anyio.to_thread.run_sync(self._key_or_fetch, kid)
        return self._decode(token, alg, key, audience)

    def _header(self, token: str) -> tuple[str, str | None]:
        if len(token) > MAX_CREDENTIAL_CHARS:
            raise IdentityError("token too large")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise IdentityError("malformed token") from None
        alg = header.get("alg")
        if alg not in self.settings.algorithms:
            raise IdentityError("algorithm not allowed")
        return alg, header.get("kid")

    def _pick(self, kid: str | None) -> _SigningKey | None:
        """The key with this id; without an id, the only key of a one-key set."""
        keys = self._keys  # replaced whole on refresh, so this read needs no lock
        candidates = [k for k in keys if k.kid == kid] if kid else keys
        return candidates[0] if len(candidates) == 1 else None

    def _cached_key(self, kid: str | None) -> _SigningKey | None:
        fetched_at = self._fetched_at
        if fetched_at is None or self._clock() - fetched_at >= self._cache_s:
            return None
        return self._pick(kid)

    def _key_or_fetch(self, kid: str | None) -> _SigningKey:
        with self._lock:
            now = self._clock()
            stale = self._fetched_at is None or now - self._fetched_at >= self._cache_s
            may_fetch = (self._attempted_at is None
                         or now - self._attempted_at >= self._refetch_min_s)
            if may_fetch and (stale or self._pick(kid) is None):
                self._refresh(now)
            key = self._pick(kid)
        if key is not None:
            return key
        if self._fetched_at is None:
            raise IdentityError("signing keys unavailable")
        raise IdentityError("unknown signing key")

    def _refresh(self, now: float) -> None:
        self._attempted_at = now
        try:
            keys = _signing_keys(self._read_jwks())
        except (OSError, httpx.HTTPError, ValueError) as exc:
            log.warning("could not load JWT signing keys from %s: %s", self.settings.jwks, exc)
            return
        self._keys, self._fetched_at = keys, now
        log.info("loaded %d JWT signing keys from %s", len(keys), self.settings.jwks)

    def _read_jwks(self) -> object:
        if self._url is None:
            return json.loads(Path(self.settings.jwks).read_text(encoding="utf-8"))
        response = httpx.get(self._url, timeout=self._timeout_s,
                             headers={"Accept": "application/json"})
        response.raise_for_status()
        return response.json()

    def _decode(self, token: str, alg: str, key: _SigningKey, audience: str) -> dict[str, Any]:
        if not key.fits(alg):
            raise IdentityError("algorithm does not match the signing key")
        s = self.settings
        try:
            return jwt.decode(
                token, key=key.public_key, algorithms=[alg], audience=audience,
                issuer=s.issuer, leeway=s.leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.MissingRequiredClaimError as exc:
            raise IdentityError(f"token lacks the {exc.claim!r} claim") from None
        except jwt.PyJWTError as exc:
            reason = next(r for kind, r in _JWT_ERRORS if isinstance(exc, kind))
            raise IdentityError(reason) from None

    def _caller(self, claims: Mapping[str, Any]) -> Caller:
        s = self.settings
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise IdentityError("token has no subject")
        return Caller(kind="jwt", subject=subject, groups=_claimed_groups(claims, s.groups_claim))


def _claimed_groups(claims: Mapping[str, Any], claim: str) -> tuple[str, ...]:
    """Groups from a list of strings, or from one string separated by spaces or commas."""
    value = claims.get(claim)
    if value is None:
        items: Sequence[str] = ()
    elif isinstance(value, str):
        items = re.split(r"[\s,]+", value)
    elif isinstance(value, builtins.list) and all(isinstance(g, str) for g in value):
        items = value
    else:
        raise IdentityError("groups claim is not a list of strings")
    groups = tuple(dict.fromkeys(g.strip() for g in items if g.strip()))
    if not groups:
        raise IdentityError("token carries no groups")
    return groups


async def identify(authorization_header: str | None, aconn: psycopg.AsyncConnection,
                   verifier: JwtVerifier | None) -> Caller:
    """The verified caller of a request, from its Authorization header alone.

    `Bearer kb_...` is an app's API token; `Bearer <header>.<payload>.<signature>` an employee's
    JWT (when a verifier is configured). Anything else raises IdentityError.
    """
    scheme, _, credentials = (authorization_header or "").strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() != "bearer" or not credentials:
        raise IdentityError("expected an Authorization: Bearer header")
    if credentials.startswith(TOKEN_PREFIX):
        caller = await TokenStore.verify(aconn, credentials)
        if caller is None:
            raise IdentityError("unknown or revoked API token")
        return caller
    if credentials.count(".") == 2:
        if verifier is None:
            raise IdentityError("JWT sign-in is not configured")
        return await verifier.verify_async(credentials)
    raise IdentityError("unrecognised bearer token")
