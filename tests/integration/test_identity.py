"""Caller identity: apps' API tokens in the real database, employees' JWTs verified against keys
the tests generate, served as a JWKS file and over a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import inspect
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from kb_cli.main import main
from kb_core.api_tokens import TokenNameTakenError, TokenStore, hash_token, new_token
from kb_core.callers import Caller
from kb_core.settings import Settings
from query_service.identity import IdentityError, JwtSettings, JwtVerifier, identify

ISSUER = "https://idp.example.co.jp/realms/corp"
AUDIENCE = "kb-search"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- API tokens ---------------------------------------------------------------------------


def test_new_tokens_are_prefixed_long_and_never_repeat():
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(t.startswith("kb_") and len(t) >= 3 + 43 for t in tokens)
    assert hash_token("kb_x") == hashlib.sha256(b"kb_x").hexdigest()


@pytest.mark.anyio
async def test_a_created_token_verifies_as_its_app(conn, database_url):
    token = TokenStore.create(conn, "chatbot", ["hr", "all", "hr"])
    async with await psycopg.AsyncConnection.connect(database_url) as aconn:
        caller = await TokenStore.verify(aconn, token)
    assert caller == Caller(kind="token", subject="chatbot", groups=("hr", "all"))


def test_only_the_hash_of_a_token_is_stored(conn):
    token = TokenStore.create(conn, "chatbot", ["hr"])
    rows = conn.execute("SELECT name, token_hash, prefix, groups FROM api_tokens").fetchall()
    assert rows == [("chatbot", hash_token(token), token[:8], ["hr"])]
    dump = json.dumps(conn.execute("SELECT to_jsonb(t) FROM api_tokens t").fetchall())
    assert token not in dump and token[8:] not in dump


def test_a_listing_shows_the_prefix_but_never_the_hash_or_the_token(conn):
    token = TokenStore.create(conn, "chatbot", ["hr", "all"])
    [listed] = TokenStore.list(conn)
    assert set(listed) == {"name", "prefix", "groups", "created_at", "last_used_at", "revoked"}
    assert listed["name"] == "chatbot" and listed["prefix"] == token[:8]
    assert listed["groups"] == ["hr", "all"] and listed["revoked"] is False
    assert listed["last_used_at"] is None
    assert token not in repr(listed) and hash_token(token) not in repr(listed)


@pytest.mark.anyio
async def test_a_revoked_token_no_longer_verifies_and_its_name_is_free_again(conn, database_url):
    token = TokenStore.create(conn, "chatbot", ["hr"])
    assert TokenStore.revoke(conn, "chatbot") is True
    assert TokenStore.revoke(conn, "chatbot") is False
    assert TokenStore.revoke(conn, "nobody") is False
    successor = TokenStore.create(conn, "chatbot", ["all"])
    async with await psycopg.AsyncConnection.connect(database_url) as aconn:
        assert await TokenStore.verify(aconn, token) is None
        assert (await TokenStore.verify(aconn, successor)).groups == ("all",)
    assert [t["revoked"] for t in TokenStore.list(conn)] == [True, False]


def test_a_live_token_name_cannot_be_taken_twice(conn):
    TokenStore.create(conn, "chatbot", ["hr"])
    with pytest.raises(TokenNameTakenError):
        TokenStore.create(conn, "chatbot", ["all"])
    with pytest.raises(ValueError):
        TokenStore.create(conn, "empty-groups", [" ", ""])
    assert len(TokenStore.list(conn)) == 1


@pytest.mark.anyio
async def test_a_wrong_token_does_not_verify(conn, database_url):
    token = TokenStore.create(conn, "chatbot", ["hr"])
    altered = token[:-1] + ("A" if token[-1] != "A" else "B")
    async with await psycopg.AsyncConnection.connect(database_url) as aconn:
        for wrong in (altered, token + "x", new_token(), hash_token(token), "", "kb_"):
            assert await TokenStore.verify(aconn, wrong) is None


@pytest.mark.anyio
async def test_last_used_at_is_written_at_most_once_a_minute(conn, database_url):
    token = TokenStore.create(conn, "chatbot", ["hr"])

    def last_used():
        return conn.execute("SELECT last_used_at FROM api_tokens").fetchone()[0]

    async with await psycopg.AsyncConnection.connect(database_url) as aconn:
        await TokenStore.verify(aconn, token)
        first = last_used()
        assert first is not None  # committed, although aconn is not in autocommit mode
        await TokenStore.verify(aconn, token)
        assert last_used() == first
        conn.execute("UPDATE api_tokens SET last_used_at = last_used_at - interval '2 minutes'")
        await TokenStore.verify(aconn, token)
        assert last_used() >= first  # moved back two minutes, then written again


# --- identify() ------------------------------------------------------------------------------


def test_identify_reads_only_the_authorization_header():
    # The request body never reaches identification: it cannot claim groups.
    assert list(inspect.signature(identify).parameters) == ["authorization_header", "aconn",
                                                            "verifier"]


@pytest.mark.anyio
async def test_identify_accepts_an_api_token_and_rejects_everything_else(conn, database_url,
                                                                         caplog):
    caplog.set_level(logging.DEBUG)
    token = TokenStore.create(conn, "chatbot", ["hr"])
    revoked = TokenStore.create(conn, "gone", ["hr"])
    TokenStore.revoke(conn, "gone")
    async with await psycopg.AsyncConnection.connect(database_url) as aconn:
        for header in (f"Bearer {token}", f"bearer  {token} "):
            caller = await identify(header, aconn, None)
            assert caller == Caller(kind="token", subject="chatbot", groups=("hr",))
        bad_headers = [None, "", "Bearer", "Bearer ", token, f"Basic {token}", f"Token {token}",
                       f"Bearer {revoked}", f"Bearer {new_token()}", "Bearer a.b.c",
                       "Bearer not-a-token", f"Bearer {token[:-2]}"]
        for header in bad_headers:
            with pytest.raises(IdentityError) as raised:
                await identify(header, aconn, None)
            assert token not in str(raised.value) and revoked not in str(raised.value)
            assert raised.value.reason == str(raised.value)
    assert token not in caplog.text and revoked not in caplog.text


# --- JWT -----------------------------------------------------------------------------------


class Key:
    """A signing key pair the tests own, with its public JWK."""

    def __init__(self, kid: str, private_key, alg: str) -> None:
        self.kid, self.private_key, self.alg = kid, private_key, alg
        to_jwk = jwt.algorithms.RSAAlgorithm if alg.startswith("RS") else jwt.algorithms.ECAlgorithm
        self.jwk = {**json.loads(to_jwk.to_jwk(private_key.public_key())), "kid": kid,
                    "use": "sig"}

    def public_pem(self) -> bytes:
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def sign(self, headers: dict | None = None, **claims: object) -> str:
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "u-1001", "iat": now,
                   "exp": now + 300, "groups": ["hr", "all"], **claims}
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, self.private_key, algorithm=self.alg,
                          headers={"kid": self.kid, **(headers or {})})


@pytest.fixture(scope="module")
def rsa_key() -> Key:
    return Key("rsa-1", rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")


@pytest.fixture(scope="module")
def ec_key() -> Key:
    return Key("ec-1", ec.generate_private_key(ec.SECP256R1()), "ES256")


@pytest.fixture(scope="module")
def other_rsa_key() -> Key:
    return Key("rsa-1", rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")


@pytest.fixture
def jwks_file(tmp_path: Path, rsa_key: Key, ec_key: Key) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [rsa_key.jwk, ec_key.jwk]}))
    return path


def _settings(jwks: str | Path, **overrides: object) -> JwtSettings:
    return JwtSettings(issuer=ISSUER, audience=AUDIENCE, jwks=str(jwks), **overrides)


class JwksServer:
    """A real HTTP server on 127.0.0.1 serving `self.document`, counting requests."""

    def __init__(self, document: dict) -> None:
        self.document, self.requests = document, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                outer.requests += 1
                body = json.dumps(outer.document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/protocol/openid-connect/certs"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def jwks_server(rsa_key: Key, ec_key: Key) -> Iterator[JwksServer]:
    server = JwksServer({"keys": [rsa_key.jwk, ec_key.jwk]})
    yield server
    server.close()


@pytest.mark.parametrize("which", ["rsa_key", "ec_key"])
def test_a_valid_jwt_verifies_from_a_jwks_file(which, request, jwks_file):
    key: Key = request.getfixturevalue(which)
    caller = JwtVerifier(_settings(jwks_file)).verify(key.sign())
    assert caller == Caller(kind="jwt", subject="u-1001", groups=("hr", "all"))


def test_a_valid_jwt_verifies_from_a_jwks_url_fetched_once(jwks_server, rsa_key, ec_key):
    verifier = JwtVerifier(_settings(jwks_server.url))
    assert verifier.verify(rsa_key.sign()).groups == ("hr", "all")
    assert verifier.verify(ec_key.sign(sub="u-2002")).subject == "u-2002"
    assert jwks_server.requests == 1  # cached


def test_a_jwt_within_the_leeway_still_verifies(jwks_file, rsa_key):
    now = int(time.time())
    verifier = JwtVerifier(_settings(jwks_file, leeway_s=30))
    assert verifier.verify(rsa_key.sign(exp=now - 10)).subject == "u-1001"
    with pytest.raises(IdentityError, match="expired"):
        verifier.verify(rsa_key.sign(exp=now - 60))


def _unsigned(header: dict, payload: dict, sign=lambda signing_input: b"") -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    return f"{signing_input}.{b64(sign(signing_input.encode()))}"


def _claims(**overrides: object) -> dict:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": "u-1001", "iat": now, "exp": now + 300,
            "groups": ["admin"], **overrides}


REJECTED = {
    "expired": (lambda k, o, e: k.sign(exp=int(time.time()) - 3600), "expired"),
    "not yet valid": (lambda k, o, e: k.sign(nbf=int(time.time()) + 3600), "not yet valid"),
    "issued in the future": (lambda k, o, e: k.sign(iat=int(time.time()) + 3600),
                             "not yet valid"),
    "wrong issuer": (lambda k, o, e: k.sign(iss="https://evil.example"), "issuer"),
    "wrong audience": (lambda k, o, e: k.sign(aud="another-app"), "audience"),
    "no expiry": (lambda k, o, e: k.sign(exp=None), "'exp'"),
    "no subject": (lambda k, o, e: k.sign(sub=None), "'sub'"),
    "signed by another key": (lambda k, o, e: o.sign(), "bad signature"),
    "alg none": (lambda k, o, e: _unsigned({"alg": "none", "kid": k.kid}, _claims()),
                 "algorithm not allowed"),
    "HS256 with the public key": (
        lambda k, o, e: _unsigned(
            {"alg": "HS256", "kid": k.kid}, _claims(),
            lambda s: hmac.new(k.public_pem(), s, hashlib.sha256).digest()),
        "algorithm not allowed"),
    "RS256 header on an EC key": (
        lambda k, o, e: _unsigned({"alg": "RS256", "kid": e.kid}, _claims(), lambda s: b"x" * 256),
        "does not match"),
    "unknown kid": (lambda k, o, e: k.sign(headers={"kid": "rotated-away"}),
                    "unknown signing key"),
    "missing groups claim": (lambda k, o, e: k.sign(groups=None), "no groups"),
    "empty groups": (lambda k, o, e: k.sign(groups=[]), "no groups"),
    "groups not strings": (lambda k, o, e: k.sign(groups=[1, 2]), "not a list of strings"),
    "garbage": (lambda k, o, e: "abc.def.ghi", "malformed"),
    "tampered payload": (lambda k, o, e: _swap_payload(k.sign(), _claims()), "bad signature"),
}


def _swap_payload(token: str, claims: dict) -> str:
    header, _, signature = token.split(".")
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{payload}.{signature}"


@pytest.mark.parametrize("case", list(REJECTED))
def test_a_jwt_that_does_not_verify_raises_identity_error(case, jwks_file, rsa_key,
                                                          other_rsa_key, ec_key):
    make, reason = REJECTED[case]
    token = make(rsa_key, other_rsa_key, ec_key)
    with pytest.raises(IdentityError, match=reason) as raised:
        JwtVerifier(_settings(jwks_file)).verify(token)
    assert token not in str(raised.value)


def test_the_groups_claim_name_is_configurable(jwks_file, rsa_key):
    verifier = JwtVerifier(_settings(jwks_file, groups_claim="roles"))
    caller = verifier.verify(rsa_key.sign(roles=["経理", "all"], groups=["admin"]))
    assert caller.groups == ("経理", "all")
    with pytest.raises(IdentityError, match="no groups"):
        verifier.verify(rsa_key.sign())


def test_groups_given_as_one_string_are_split_on_spaces_and_commas(jwks_file, rsa_key):
    caller = JwtVerifier(_settings(jwks_file)).verify(rsa_key.sign(groups="hr, all  sales,hr"))
    assert caller.groups == ("hr", "all", "sales")


def test_an_unknown_kid_refetches_the_jwks_at_most_once_a_minute(jwks_server, rsa_key):
    rotated = Key("rsa-2", rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")
    now = [1000.0]
    verifier = JwtVerifier(_settings(jwks_server.url), clock=lambda: now[0])
    assert verifier.verify(rsa_key.sign()).subject == "u-1001"
    jwks_server.document = {"keys": [rsa_key.jwk, rotated.jwk]}  # the IdP rotates its keys
    now[0] += 10
    with pytest.raises(IdentityError, match="unknown signing key"):
        verifier.verify(rotated.sign())
    with pytest.raises(IdentityError, match="unknown signing key"):
        verifier.verify(rotated.sign(headers={"kid": "junk"}))
    assert jwks_server.requests == 1  # junk key ids cannot make us hammer the IdP
    now[0] += 60
    assert verifier.verify(rotated.sign()).subject == "u-1001"
    assert jwks_server.requests == 2
    now[0] += 300  # the cache expires: refreshed on the next request
    assert verifier.verify(rsa_key.sign()).subject == "u-1001"
    assert jwks_server.requests == 3


def test_keys_stay_in_use_when_the_jwks_url_stops_answering(jwks_server, rsa_key):
    now = [0.0]
    verifier = JwtVerifier(_settings(jwks_server.url), clock=lambda: now[0], timeout_s=2)
    verifier.verify(rsa_key.sign())
    jwks_server.close()
    now[0] += 1000
    assert verifier.verify(rsa_key.sign()).subject == "u-1001"


def test_an_unreachable_jwks_refuses_every_jwt(tmp_path, rsa_key):
    verifier = JwtVerifier(_settings(tmp_path / "missing.json"))
    with pytest.raises(IdentityError, match="signing keys unavailable"):
        verifier.verify(rsa_key.sign())


def test_symmetric_and_private_keys_in_a_jwks_are_ignored(tmp_path, rsa_key):
    path = tmp_path / "jwks.json"
    secret = {"kty": "oct", "kid": "hmac", "k": base64.urlsafe_b64encode(b"s" * 32).decode()}
    path.write_text(json.dumps({"keys": [secret]}))
    token = _unsigned({"alg": "HS256", "kid": "hmac"}, _claims(),
                      lambda s: hmac.new(b"s" * 32, s, hashlib.sha256).digest())
    with pytest.raises(IdentityError):
        JwtVerifier(_settings(path, algorithms=("RS256", "ES256"))).verify(token)


def test_jwt_settings_come_from_the_environment_and_refuse_symmetric_algorithms():
    def from_env(env: dict[str, str]) -> JwtSettings | None:
        return JwtSettings.from_settings(Settings.from_env(env).service)

    assert from_env({}) is None
    env = {"KB_JWT_ISSUER": ISSUER, "KB_JWT_AUDIENCE": AUDIENCE, "KB_JWT_JWKS": "/etc/jwks.json",
           "KB_JWT_GROUPS_CLAIM": "roles"}
    assert from_env(env) == JwtSettings(ISSUER, AUDIENCE, "/etc/jwks.json", "roles")
    with pytest.raises(ValueError, match="KB_JWT_JWKS"):
        from_env({"KB_JWT_ISSUER": ISSUER, "KB_JWT_AUDIENCE": AUDIENCE})
    for algorithms in (("HS256",), ("none",), ()):
        with pytest.raises(ValueError):
            _settings("/etc/jwks.json", algorithms=algorithms)


@pytest.mark.anyio
async def test_identify_verifies_a_jwt_bearer_with_the_configured_verifier(
        database_url, jwks_server, rsa_key, caplog):
    caplog.set_level(logging.DEBUG)
    verifier = JwtVerifier(_settings(jwks_server.url))
    token = rsa_key.sign(groups=["hr"])
    async with await psycopg.AsyncConnection.connect(database_url) as aconn:
        caller = await identify(f"Bearer {token}", aconn, verifier)
        assert caller == Caller(kind="jwt", subject="u-1001", groups=("hr",))
        assert (await identify(f"Bearer {token}", aconn, verifier)) == caller
        with pytest.raises(IdentityError, match="not configured"):
            await identify(f"Bearer {token}", aconn, None)
        with pytest.raises(IdentityError, match="wrong audience"):
            await identify(f"Bearer {rsa_key.sign(aud='x')}", aconn, verifier)
    assert jwks_server.requests == 1
    assert token not in caplog.text


# --- kb token ------------------------------------------------------------------------------


def _kb_token(argv: list[str], settings, url: str) -> int:
    """`kb token ...` in this process, on the database at `url` (the settings fixture exports
    it as KB_DATABASE_URL)."""
    assert settings.database_url == url
    return main(["token", *argv])


@pytest.mark.anyio
async def test_kb_token_create_list_revoke(settings, database_url, capsys):
    assert _kb_token(["create", "chatbot", "--groups", "hr,all", "--json"],
                     settings, database_url) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["name"] == "chatbot" and created["groups"] == ["hr", "all"]
    token = created["token"]

    assert _kb_token(["create", "chatbot", "--groups", "hr"], settings, database_url) == 1
    assert capsys.readouterr().out == ""

    assert _kb_token(["create", "wiki", "--groups", "all"], settings, database_url) == 0
    shown = capsys.readouterr()
    assert shown.out.strip().startswith("kb_") and len(shown.out.strip().splitlines()) == 1

    assert _kb_token(["list", "--json"], settings, database_url) == 0
    listing = capsys.readouterr().out
    tokens = json.loads(listing)["tokens"]
    assert [t["name"] for t in tokens] == ["chatbot", "wiki"]
    assert tokens[0]["prefix"] == token[:8] and tokens[0]["revoked"] is False
    assert token not in listing and hash_token(token) not in listing
    assert "token_hash" not in tokens[0]

    async with await psycopg.AsyncConnection.connect(database_url) as aconn:
        assert (await identify(f"Bearer {token}", aconn, None)).groups == ("hr", "all")
        assert _kb_token(["revoke", "chatbot", "--json"], settings, database_url) == 0
        assert json.loads(capsys.readouterr().out) == {"revoked": True}
        with pytest.raises(IdentityError):
            await identify(f"Bearer {token}", aconn, None)

    assert _kb_token(["revoke", "chatbot", "--json"], settings, database_url) == 1
    assert json.loads(capsys.readouterr().out) == {"revoked": False}
    assert _kb_token(["list"], settings, database_url) == 0
    human = capsys.readouterr().out
    assert "chatbot" in human and "revoked" in human and token not in human
