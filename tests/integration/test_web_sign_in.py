"""The page's sign-in and sessions: the real app and database, and a real OpenID Connect
provider on 127.0.0.1 (tests/fake_oidc.py) that the app reaches over HTTP."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from litestar.testing import AsyncTestClient

from kb_core.api_tokens import TokenStore, hash_token
from kb_core.callers import Caller
from kb_core.database import connect
from kb_core.queries import query
from tests.fake_oidc import CLIENT_ID, FakeOidcProvider, fake_oidc_provider
from tests.web_app import HOLIDAY_QUESTION, free_port, index_corpus, served, web_app

pytestmark = pytest.mark.anyio

PUBLIC_URL = "http://testserver.local"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def provider() -> Iterator[FakeOidcProvider]:
    with fake_oidc_provider() as p:
        yield p


@pytest.fixture
def corpus(settings, instance, tmp_path) -> Path:
    return index_corpus(tmp_path / "corpus", settings, instance)


def oidc(provider: FakeOidcProvider, public_url: str = PUBLIC_URL) -> dict[str, str]:
    return {"jwt_issuer": provider.issuer, "jwt_audience": CLIENT_ID,
            "jwt_jwks": f"{provider.issuer}/jwks", "oidc_client_id": CLIENT_ID,
            "public_url": public_url}


@pytest.fixture
async def client(settings, provider) -> AsyncIterator[AsyncTestClient]:
    """The app over an empty index (most of these tests need no documents)."""
    async with AsyncTestClient(app=web_app(settings, **oidc(provider)),
                               base_url=PUBLIC_URL) as c:
        yield c


async def start_sign_in(client: AsyncTestClient, return_to: str = "/") -> dict[str, str]:
    """Begin a sign-in; return the authorization request's parameters."""
    response = await client.get("/auth/login", params={"return_to": return_to},
                                follow_redirects=False)
    assert response.status_code == 303, response.text
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(response.headers["location"]).query))


def provider_answer(provider: FakeOidcProvider, request: dict[str, str]) -> dict[str, str]:
    """The browser at the provider: where it is sent back to, as query parameters."""
    response = httpx.get(f"{provider.issuer}/authorize", params=request, follow_redirects=False)
    assert response.status_code == 302
    back = urllib.parse.urlsplit(response.headers["location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == f"{PUBLIC_URL}/auth/callback"
    return dict(urllib.parse.parse_qsl(back.query))


async def sign_in(client: AsyncTestClient, provider: FakeOidcProvider,
                  return_to: str = "/") -> httpx.Response:
    answer = provider_answer(provider, await start_sign_in(client, return_to))
    return await client.get("/auth/callback", params=answer, follow_redirects=False)


def csrf_of(page_html: str) -> str:
    marker = '<meta name="csrf-token" content="'
    start = page_html.index(marker) + len(marker)
    return page_html[start:page_html.index('"', start)]


async def test_sign_in_gives_a_session_with_the_groups_of_the_verified_id_token(
    corpus, client, provider, settings
):
    provider.user = {"sub": "emp-7", "name": "佐藤 一郎", "groups": ["hr"]}
    response = await sign_in(client, provider, return_to="/?from=mail")
    assert response.status_code == 303 and response.headers["location"] == "/?from=mail"
    cookie = response.headers.get_list("set-cookie")[0]
    assert cookie.startswith("kb_session=")
    assert "httponly" in cookie.lower() and "samesite=lax" in cookie.lower()
    assert "secure" not in cookie.lower()
    session_id = client.cookies["kb_session"]

    page = await client.get("/")
    assert "佐藤 一郎" in page.text and "hr" in page.text
    recent = await client.get("/v1/recent-questions")
    assert recent.status_code == 200
    with connect(settings.database_url, autocommit=True) as conn:
        stored = conn.execute("SELECT id_hash, caller_kind, subject, groups FROM web_sessions"
                              ).fetchall()
    # Only the hash of the cookie's value is kept.
    assert stored == [(hash_token(session_id), "jwt", "emp-7", ["hr"])]
    # The request cannot name groups: the body is refused, the session's groups stand.
    search = await client.post("/v1/search", json={"query": "給与支給日"},
                               headers={"X-CSRF-Token": csrf_of(page.text)})
    assert search.status_code == 200
    assert search.json()["hits"][0]["path"].endswith("hr/給与規程.md")


async def test_the_authorization_request_uses_pkce_a_state_and_a_nonce(client, provider):
    request = await start_sign_in(client)
    assert request["response_type"] == "code" and request["client_id"] == CLIENT_ID
    assert request["redirect_uri"] == f"{PUBLIC_URL}/auth/callback"
    assert request["code_challenge_method"] == "S256" and len(request["code_challenge"]) == 43
    assert len(request["state"]) >= 32 and len(request["nonce"]) >= 32
    assert "openid" in request["scope"].split()
    response = await client.get("/auth/callback", params=provider_answer(provider, request),
                                follow_redirects=False)
    assert response.status_code == 303
    # The provider checked the verifier against the challenge; it was sent, not the challenge.
    [token_request] = provider.token_requests
    assert token_request["code_verifier"] != request["code_challenge"]


async def test_a_replayed_state_is_refused(client, provider):
    request = await start_sign_in(client)
    answer = provider_answer(provider, request)
    first = await client.get("/auth/callback", params=answer, follow_redirects=False)
    assert first.status_code == 303
    again = await client.get("/auth/callback", params=answer, follow_redirects=False)
    assert again.status_code == 400 and again.json()["error"] == "sign_in_failed"
    # Even with a fresh code from the provider, the used state stays used.
    answer["code"] = provider_answer(provider, request)["code"]
    fresh_code = await client.get("/auth/callback", params=answer, follow_redirects=False)
    assert fresh_code.status_code == 400


async def test_a_sign_in_started_in_another_browser_is_refused(client, provider):
    answer = provider_answer(provider, await start_sign_in(client))
    started_here = client.cookies["kb_signin"]
    client.cookies.clear()  # another browser: the provider's answer without the cookie
    response = await client.get("/auth/callback", params=answer, follow_redirects=False)
    assert response.status_code == 400 and "another browser" in response.json()["detail"]
    # and the attempt is used up: the browser that started it cannot finish it either
    client.cookies.set("kb_signin", started_here)
    retry = await client.get("/auth/callback", params=answer, follow_redirects=False)
    assert retry.status_code == 400


async def test_an_id_token_with_another_nonce_is_refused(client, provider):
    provider.nonce_override = "not-the-nonce-we-sent"
    response = await sign_in(client, provider)
    assert response.status_code == 400 and "nonce" in response.json()["detail"]
    assert "kb_session" not in client.cookies


async def test_an_id_token_for_another_client_is_refused(client, provider):
    provider.audience_override = "another-app"
    response = await sign_in(client, provider)
    assert response.status_code == 400
    assert response.json()["detail"] == "ID token refused: wrong audience"
    assert "kb_session" not in client.cookies


async def test_an_id_token_issued_to_another_party_is_refused_even_for_this_audience(
    client, provider
):
    provider.user = {**provider.user, "azp": "another-app"}
    refused = await sign_in(client, provider)
    assert refused.status_code == 400 and "another party" in refused.json()["detail"]


async def test_the_providers_error_text_is_logged_not_shown(client, provider, caplog):
    request = await start_sign_in(client)
    wording = "Your account is locked: call +81-3-0000-0000"
    response = await client.get("/auth/callback", params={"state": request["state"],
                                                          "error": wording},
                                follow_redirects=False, headers={"Accept": "text/html"})
    assert response.status_code == 400 and wording not in response.text
    assert "the identity provider refused the sign-in" in response.text
    assert wording in caplog.text


async def test_an_id_token_for_several_clients_must_name_this_one_as_its_party(client, provider):
    provider.extra_audiences = ["another-app"]
    refused = await sign_in(client, provider)
    assert refused.status_code == 400 and "another party" in refused.json()["detail"]
    provider.user = {**provider.user, "azp": CLIENT_ID}
    assert (await sign_in(client, provider)).status_code == 303


def _provider_answer_in(browser: httpx.Client, service: str) -> str:
    """A sign-in started by `browser` and answered by the provider: the callback's URL."""
    login = browser.get(f"{service}/auth/login")
    at_provider = httpx.get(login.headers["location"])
    assert at_provider.status_code == 302
    return at_provider.headers["location"]


def test_api_requests_are_answered_while_the_provider_stalls_sign_ins(settings, provider):
    port = free_port()
    app = web_app(settings, **oidc(provider, f"http://127.0.0.1:{port}"))
    with connect(settings.database_url, autocommit=True) as conn:
        api_token = TokenStore.create(conn, "portal", ["all-employees"])
    # More browsers waiting on the provider than the identity pool has connections.
    with served(app, port) as service, ThreadPoolExecutor(6) as pool, ExitStack() as closing:
        browsers = [closing.enter_context(httpx.Client(timeout=30)) for _ in range(6)]
        callbacks = [_provider_answer_in(b, service) for b in browsers]
        provider.answering.clear()
        try:
            signed_in = [pool.submit(b.get, url)
                         for b, url in zip(browsers, callbacks, strict=True)]
            deadline = time.monotonic() + 3
            while len(provider.token_requests) < len(browsers) and time.monotonic() < deadline:
                time.sleep(0.05)
            started = time.monotonic()
            response = httpx.get(f"{service}/v1/recent-questions",
                                 headers={"Authorization": f"Bearer {api_token}"}, timeout=30)
            assert response.status_code == 200, response.text
            assert time.monotonic() - started < 2
        finally:
            provider.answering.set()
        assert [f.result().status_code for f in signed_in] == [303] * len(browsers)


async def test_a_return_target_on_another_site_is_refused(client):
    for target in ("https://evil.example/", "//evil.example/", "/\\evil.example/",
                   "http:/evil.example", "javascript:alert(1)", "evil", "/\t/evil.example"):
        response = await client.get("/auth/login", params={"return_to": target},
                                    follow_redirects=False)
        assert response.status_code == 400, target
        assert response.json()["error"] == "invalid_return_to"


async def test_the_session_id_changes_at_every_sign_in(client, provider):
    await sign_in(client, provider)
    first = client.cookies["kb_session"]
    await sign_in(client, provider)
    second = client.cookies["kb_session"]
    assert first != second
    client.cookies.set("kb_session", first)
    assert (await client.get("/v1/recent-questions")).status_code == 401


async def test_a_forged_or_expired_session_is_refused(client, provider, settings):
    client.cookies.set("kb_session", "forged-session-id")
    assert (await client.get("/v1/recent-questions")).status_code == 401
    page = await client.get("/")
    assert 'data-signed-in="false"' in page.text

    await sign_in(client, provider)
    assert (await client.get("/v1/recent-questions")).status_code == 200
    with connect(settings.database_url, autocommit=True) as conn:
        conn.execute("UPDATE web_sessions SET last_seen_at = now() - interval '61 minutes'")
    assert (await client.get("/v1/recent-questions")).status_code == 401  # idle

    await sign_in(client, provider)
    with connect(settings.database_url, autocommit=True) as conn:
        conn.execute("UPDATE web_sessions SET expires_at = now() - interval '1 second'")
    assert (await client.get("/v1/recent-questions")).status_code == 401  # absolute


async def test_state_changing_requests_made_with_the_session_need_its_csrf_token(
    client, provider, settings
):
    await sign_in(client, provider)
    token = csrf_of((await client.get("/")).text)
    body = {"question": HOLIDAY_QUESTION}
    missing = await client.post("/v1/ask", json=body)
    assert missing.status_code == 403 and missing.json()["error"] == "forbidden"
    wrong = await client.post("/v1/ask", json=body, headers={"X-CSRF-Token": "x" + token})
    assert wrong.status_code == 403
    assert (await client.post("/auth/logout")).status_code == 403
    ok = await client.post("/v1/ask", json=body, headers={"X-CSRF-Token": token})
    assert ok.status_code == 200, ok.text

    # Bearer clients send no CSRF token and need none.
    with connect(settings.database_url, autocommit=True) as conn:
        api_token = TokenStore.create(conn, "portal", ["all-employees"])
    client.cookies.clear()
    response = await client.post("/v1/ask", json=body,
                                 headers={"Authorization": f"Bearer {api_token}"})
    assert response.status_code == 200


async def test_sign_out_ends_the_session_on_the_server(client, provider, settings):
    await sign_in(client, provider)
    session_id = client.cookies["kb_session"]
    token = csrf_of((await client.get("/")).text)
    response = await client.post("/auth/logout", headers={"X-CSRF-Token": token})
    assert response.status_code == 204
    assert "Max-Age=0" in response.headers["set-cookie"]
    with connect(settings.database_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM web_sessions").fetchone()[0] == 0
    client.cookies.set("kb_session", session_id)
    assert (await client.get("/v1/recent-questions")).status_code == 401


async def test_signing_out_of_an_ended_session_clears_its_cookie(client, provider, settings):
    await sign_in(client, provider)
    with connect(settings.database_url, autocommit=True) as conn:
        conn.execute("UPDATE web_sessions SET expires_at = now() - interval '1 second'")
    response = await client.post("/auth/logout")
    assert response.status_code == 204 and "Max-Age=0" in response.headers["set-cookie"]
    assert "kb_session" not in client.cookies


async def test_a_bearer_token_wins_over_a_session_cookie_and_never_falls_back_to_it(
    client, provider, settings
):
    await sign_in(client, provider)
    assert (await client.get("/v1/recent-questions")).status_code == 200
    with connect(settings.database_url, autocommit=True) as conn:
        api_token = TokenStore.create(conn, "portal", ["all-employees"])
    # The token is the credential: no CSRF token is asked for, though the cookie rides along.
    body = {"question": HOLIDAY_QUESTION}
    ok = await client.post("/v1/ask", json=body, headers={"Authorization": f"Bearer {api_token}"})
    assert ok.status_code == 200, ok.text
    for bad in (f"Bearer {api_token}x", "Bearer not-a-token", "Basic dXNlcjpwYXNz"):
        for method, path in (("GET", "/v1/recent-questions"), ("POST", "/v1/ask")):
            response = await client.request(method, path, headers={"Authorization": bad},
                                            json=body if method == "POST" else None)
            assert response.status_code == 401, (bad, path, response.text)


async def test_the_cookie_is_secure_where_the_public_url_is_https(settings, provider):
    app = web_app(settings, **oidc(provider, "https://kb.example.co.jp"))
    async with AsyncTestClient(app=app, base_url="https://kb.example.co.jp") as client:
        login = await client.get("/auth/login", follow_redirects=False)
        assert "; Path=/;" in login.headers["set-cookie"] and "Secure" in login.headers[
            "set-cookie"]
        request = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(
            login.headers["location"]).query))
        assert request["redirect_uri"] == "https://kb.example.co.jp/auth/callback"
        # The sign-in cookie is Secure too, and __Host- so no sibling subdomain can plant one.
        assert "__Host-kb_signin" in client.cookies
        response = httpx.get(f"{provider.issuer}/authorize", params=request,
                             follow_redirects=False)
        answer = dict(urllib.parse.parse_qsl(
            urllib.parse.urlsplit(response.headers["location"]).query))
        signed_in = await client.get("/auth/callback", params=answer, follow_redirects=False)
    assert signed_in.status_code == 303, signed_in.text
    cookie = signed_in.headers.get_list("set-cookie")[0]
    assert cookie.startswith("__Host-kb_session=")
    assert "Secure" in cookie and "HttpOnly" in cookie and "Path=/" in cookie


async def test_without_sign_in_configured_the_page_says_how_to_configure_it(settings):
    async with AsyncTestClient(app=web_app(settings)) as client:
        page = await client.get("/")
        assert page.status_code == 200
        assert "KB_OIDC_CLIENT_ID" in page.text and "--dev-user" in page.text
        assert "default-src 'none'" in page.headers["content-security-policy"]
        login = await client.get("/auth/login", follow_redirects=False)
        assert login.status_code == 400


DEV_USER = Caller(kind="dev", subject="開発ユーザー", groups=("all-employees",))
LOOPBACK_URL = "http://127.0.0.1:8000"  # where `kb serve --dev-user` listens


async def test_the_development_sign_in_is_labelled_on_the_page(settings):
    async with AsyncTestClient(app=web_app(settings, dev_user=DEV_USER),
                               base_url=LOOPBACK_URL) as client:
        response = await client.get("/auth/login", follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"] == "/"
        page = await client.get("/")
        assert 'data-signed-in="true"' in page.text
        assert "開発用サインイン：開発ユーザー" in page.text
        assert "本番環境では使用しないでください" in page.text


async def test_the_development_sign_in_answers_to_loopback_names_only(settings):
    # A rebound name (evil.example resolving to 127.0.0.1) must not reach the sign-in.
    async with AsyncTestClient(app=web_app(settings, dev_user=DEV_USER),
                               base_url=LOOPBACK_URL) as client:
        for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example:8000"):
            response = await client.get("/auth/login", headers={"Host": host},
                                        follow_redirects=False)
            assert response.status_code == 400, host
            assert "kb_session" not in response.headers.get("set-cookie", "")
        for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "localhost"):
            page = await client.get("/", headers={"Host": host})
            assert page.status_code == 200, host
        # Health probes name whatever address they reach.
        assert (await client.get("/healthz", headers={"Host": "10.0.0.7:8000"})).status_code \
            == 200


async def test_only_the_public_urls_host_is_served_where_it_is_configured(settings, provider):
    async with AsyncTestClient(app=web_app(settings, **oidc(provider)),
                               base_url=PUBLIC_URL) as client:
        assert (await client.get("/", headers={"Host": "evil.example"})).status_code == 400
        assert (await client.get("/")).status_code == 200


async def test_development_sessions_end_when_the_development_sign_in_is_off(settings, provider):
    async with AsyncTestClient(app=web_app(settings, dev_user=DEV_USER),
                               base_url=LOOPBACK_URL) as dev:
        await dev.get("/auth/login", follow_redirects=False)
        assert (await dev.get("/v1/recent-questions")).status_code == 200
        kept = dev.cookies["kb_session"]
    # Restarted without --dev-user: the stored development session is deleted at start-up...
    async with AsyncTestClient(app=web_app(settings, **oidc(provider)),
                               base_url=PUBLIC_URL) as client:
        deadline = time.monotonic() + 10
        while _dev_sessions(settings):
            assert time.monotonic() < deadline, "the development session was not deleted"
            await asyncio.sleep(0.05)
        # ...and one stored meanwhile (by another instance still in development mode) refused.
        with connect(settings.database_url, autocommit=True) as conn:
            conn.execute(query("create_web_session"), {
                "id_hash": hash_token(kept), "caller_kind": "dev", "subject": DEV_USER.subject,
                "display_name": DEV_USER.subject, "groups": list(DEV_USER.groups),
                "csrf_token": "t", "max_s": 3600})
        client.cookies.set("kb_session", kept)
        assert (await client.get("/v1/recent-questions")).status_code == 401
        assert 'data-signed-in="false"' in (await client.get("/")).text


def _dev_sessions(settings) -> int:
    return _count(settings, "SELECT count(*) FROM web_sessions WHERE caller_kind = 'dev'")


def _count(settings, sql: str) -> int:
    with connect(settings.database_url, autocommit=True) as conn:
        return conn.execute(sql).fetchone()[0]


async def test_ended_sessions_and_stale_sign_ins_are_purged_at_start_up(settings, provider):
    async with AsyncTestClient(app=web_app(settings, **oidc(provider)),
                               base_url=PUBLIC_URL) as client:
        await sign_in(client, provider)
        await start_sign_in(client)
    with connect(settings.database_url, autocommit=True) as conn:
        conn.execute("UPDATE web_sessions SET expires_at = now() - interval '1 second'")
        conn.execute("UPDATE sign_in_attempts SET created_at = now() - interval '11 minutes'")
    async with AsyncTestClient(app=web_app(settings, **oidc(provider)), base_url=PUBLIC_URL):
        deadline = time.monotonic() + 10
        while (_count(settings, "SELECT count(*) FROM web_sessions")
               or _count(settings, "SELECT count(*) FROM sign_in_attempts")):
            assert time.monotonic() < deadline, "nothing was purged"
            await asyncio.sleep(0.05)


def test_kb_serve_refuses_the_development_sign_in_on_a_non_loopback_address():
    for host in ("0.0.0.0", "192.0.2.10", "kb.example.co.jp"):
        result = subprocess.run(
            [str(Path(sys.executable).parent / "kb"), "serve", "--host", host,
             "--dev-user", "dev", "--groups", "all-employees"],
            capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert "refused" in result.stderr


async def test_sign_in_requests_are_rate_limited_by_the_clients_address(settings, provider):
    app = web_app(settings, **oidc(provider), rate_limit_per_minute=1, rate_limit_burst=2)
    async with AsyncTestClient(app=app, base_url=PUBLIC_URL) as client:
        codes = [(await client.get("/auth/login", follow_redirects=False)).status_code
                 for _ in range(3)]
    assert codes == [303, 303, 429]


def test_behind_a_trusted_proxy_sign_ins_are_limited_by_each_employees_address(
    settings, provider
):
    def logins(service: str, employee: str) -> list[int]:
        return [httpx.get(f"{service}/auth/login", headers={"X-Forwarded-For": employee}
                          ).status_code for _ in range(3)]

    def served_behind(trusted_proxies: tuple[str, ...]):
        port = free_port()
        app = web_app(settings, **oidc(provider, f"http://127.0.0.1:{port}"),
                      rate_limit_per_minute=1, rate_limit_burst=2)
        return served(app, port, trusted_proxies)

    # The proxy (here 127.0.0.1) is trusted: each employee it names has a bucket of its own.
    with served_behind(("127.0.0.1",)) as service:
        assert logins(service, "192.0.2.1") == [303, 303, 429]
        assert logins(service, "192.0.2.2") == [303, 303, 429]
    # Anyone else's X-Forwarded-For is ignored: it cannot buy a fresh bucket.
    with served_behind(("192.0.2.254",)) as service:
        assert logins(service, "192.0.2.1") == [303, 303, 429]
        assert logins(service, "192.0.2.2") == [429, 429, 429]
