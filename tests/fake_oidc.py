"""A company identity provider on 127.0.0.1 that speaks OpenID Connect: discovery, JWKS, the
authorization endpoint (which signs in whoever the test names, at once) and the token endpoint
(authorization code with PKCE S256, codes single-use), issuing RS256 ID tokens."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fake_servers import QuietHandler, serve

__all__ = ["FakeOidcProvider", "fake_oidc_provider"]

CLIENT_ID = "kb-search-web"


def _answering() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


@dataclass
class FakeOidcProvider:
    issuer: str = ""
    client_id: str = CLIENT_ID
    # Who the next sign-in is: the claims the ID token carries beside iss/aud/exp/nonce.
    user: dict[str, Any] = field(default_factory=lambda: {
        "sub": "emp-1001", "name": "山田 花子", "groups": ["all-employees"]})
    nonce_override: str | None = None  # an ID token carrying this nonce instead of the sent one
    extra_audiences: list[str] = field(default_factory=list)  # ID tokens for other clients too
    audience_override: str | None = None  # ID tokens for this audience instead of the client
    # Cleared: the token endpoint holds every request until it is set again (a stalled provider).
    answering: threading.Event = field(default_factory=_answering)
    key: Any = field(default_factory=lambda: rsa.generate_private_key(65537, 2048))
    authorize_requests: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    _codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def discovery(self) -> dict[str, Any]:
        return {"issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token", "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"]}

    def jwks(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": "fake-1", "use": "sig", "alg": "RS256"}]}

    def authorize(self, params: dict[str, str]) -> str:
        """Where the browser goes next: back to the client with a code (or an error)."""
        self.authorize_requests.append(params)
        if (params.get("client_id") != self.client_id or params.get("response_type") != "code"
                or params.get("code_challenge_method") != "S256"
                or not params.get("code_challenge")):
            answer = {"error": "invalid_request", "state": params.get("state", "")}
        else:
            code = secrets.token_urlsafe(16)
            with self._lock:
                self._codes[code] = {**params, "user": dict(self.user)}
            answer = {"code": code, "state": params["state"]}
        return f"{params['redirect_uri']}?{urllib.parse.urlencode(answer)}"

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.token_requests.append(form)
        self.answering.wait()
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)  # single use
        if grant is None or form.get("grant_type") != "authorization_code":
            return 400, {"error": "invalid_grant"}
        challenge = base64.urlsafe_b64encode(
            hashlib.sha256(form.get("code_verifier", "").encode()).digest()).rstrip(b"=").decode()
        if (challenge != grant["code_challenge"] or form.get("client_id") != self.client_id
                or form.get("redirect_uri") != grant["redirect_uri"]):
            return 400, {"error": "invalid_grant"}
        now = int(time.time())
        audience = [self.client_id, *self.extra_audiences] if self.extra_audiences else \
            self.audience_override or self.client_id
        claims = {**grant["user"], "iss": self.issuer, "aud": audience, "iat": now,
                  "exp": now + 300, "nonce": self.nonce_override or grant["nonce"]}
        id_token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "fake-1"})
        return 200, {"access_token": secrets.token_urlsafe(16), "token_type": "Bearer",
                     "expires_in": 300, "id_token": id_token}


@contextmanager
def fake_oidc_provider() -> Iterator[FakeOidcProvider]:
    provider = FakeOidcProvider()

    class Handler(QuietHandler):
        def _reply(self, status: int, body: dict[str, Any] | None = None,
                   location: str | None = None) -> None:
            data = json.dumps(body or {}).encode()
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            url = urllib.parse.urlsplit(self.path)
            params = dict(urllib.parse.parse_qsl(url.query))
            if url.path == "/.well-known/openid-configuration":
                self._reply(200, provider.discovery())
            elif url.path == "/jwks":
                self._reply(200, provider.jwks())
            elif url.path == "/authorize":
                self._reply(302, location=provider.authorize(params))
            else:
                self._reply(404, {"error": "not_found"})

        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            if urllib.parse.urlsplit(self.path).path != "/token":
                self._reply(404, {"error": "not_found"})
                return
            self._reply(*provider.token(dict(urllib.parse.parse_qsl(body))))

    # Stalled requests are let go first on the way out, so the server can shut down.
    with serve(Handler, closing=provider.answering) as url:
        provider.issuer = url
        yield provider
