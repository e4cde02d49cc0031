"""Nothing a caller may not read changes what it is told (docs/security.md).

Through the real service, HTTP and MCP, on one installation: a caller's every response (search
in each mode, ask in each mode, entity cards, the gap report, MCP search and ask; `query_id` and
timings aside) is the same whatever documents of groups it does not hold say, however many there
are and whoever else may read them. The hidden documents are written from the very terms the
questions ask about (salary codes, a person's name, the topic of a visible rule), so a statistic
counted over them would move a score, an order or a decision. Each plan a search can take is
exercised: the exact one, and the index one with a candidate budget small enough that its seeds
and tiers choose.

The mutation checks put any one statistic back over the whole index and show the property then
fails; the attack of issue 66 (a code's keyword score telling whether hr's documents hold it) is
replayed on the same corpus.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import kb_core.queries
import kb_search.search
from kb_core.api_tokens import TokenStore
from kb_core.database import connect
from kb_core.settings import EmbedderSettings, ServiceSettings, Settings
from kb_pipeline.in_process import ingest_paths
from query_service.app import create_app
from tests.conftest import TEMPLATE
from tests.web_app import free_port, served

pytestmark = pytest.mark.timeout(900)

# What the callers may read. `eng/` is readable by engineering and by hr: its passages share a
# set of groups with nothing hidden, and hr's statistics must not leak through it either.
VISIBLE = {
    "open/慶弔休暇規程.md": (
        "# 慶弔休暇規程\n\n## 第1条（慶弔休暇）\n本人が結婚するときの慶弔休暇は5日とする。"
        "申請は総務部に行う。\n\n## 第2条（忌引）\n親族の忌引休暇は3日とする。\n"),
    "open/年次有給休暇.md": (
        "# 年次有給休暇\n\n## 第3条（申請）\n年次有給休暇は5営業日前までに上長へ申請する。\n"
        "半日単位で取得できる。\n"),
    "open/品質基準.md": (
        "# 品質基準\n\n## 抜取検査\nQC-2031 の抜取検査は出荷ロットごとに行う。\n"
        "ZP-2041 の保証期間は納品から1年とする。\n"),
    "open/服務規程.md": "# 服務規程\n\n" + "".join(
        f"## 第{n}条（{topic}）\n{topic}については{rule}\n\n" for n, (topic, rule) in enumerate([
            ("出勤", "始業の10分前までに出社する。"), ("出張", "出張旅費規程に従い精算する。"),
            ("経費", "領収書を添えて翌月5日までに提出する。"), ("副業", "事前に届け出る。"),
            ("安全", "保護具を着用して作業する。"), ("情報", "社外に持ち出さない。"),
            ("服装", "作業服を着用する。"), ("喫煙", "指定の場所に限る。"),
            ("寮", "入寮は総務部が決める。"), ("研修", "入社後3か月以内に受講する。"),
            ("表彰", "年に一度、功労者を表彰する。"), ("懲戒", "就業規則の定めによる。"),
        ], start=10)),
    # A table: a caller is told its cells, counts and extremes of the rows it may read only.
    "open/部品価格表.md": (
        "# 部品価格表\n\n| 品番 | 単価 | 仕入先 |\n|---|---|---|\n| P-100 | 1,200 | 東洋精工 |\n"
        "| P-200 | 3,400 | 北辰工業 |\n| P-300 | 2,100 | 東洋精工 |\n"),
    "eng/設計手順.md": (
        "# 設計手順\n\n## 設計変更\nZP-2041 の設計変更は設計部長の承認を要する。"
        "問い合わせ先は設計部の山田一郎である。\n"),
}
ACCESS = {"open": ["all-employees"], "eng": ["engineering", "hr"],
          "hr": ["hr"], "exec": ["executives", "hr"]}
HIDDEN_FOLDERS = ("hr", "exec")
# Sentences the hidden documents are written from: the questions' own terms.
HIDDEN_SENTENCES = (
    "SAL-7731 の慶弔休暇手当は3万円とする。",
    "SAL-7731 は本人の結婚に支給する。",
    "SAL-7732 の役員報酬は取締役会で決める。",
    "鳩山紫織の問い合わせ先は人事部である。",
    "慶弔休暇の申請は人事部の鳩山紫織が受け付ける。",
    "年次有給休暇の繰越は翌年度に限る。",
    "ZP-2041 の販売価格は非公開とする。",
    "QC-2031 の抜取検査で不良が出たときは人事評価に反映する。",
    "設計部長の承認は役員会に報告する。",
    # Rows of the same table's shape: a higher price, another 東洋精工 part, P-100 again, and
    # a supplier no visible row names.
    "| 品番 | 単価 | 仕入先 |\n|---|---|---|\n| P-900 | 99,000 | 東洋精工 |\n"
    "| P-100 | 50 | 東洋精工 |\n| P-950 | 7,700 | 南海工業 |\n",
)
# hr's documents as the attack found them: salary codes beside the visible rule's topic.
FIRST_HIDDEN = [("hr", "給与規程", list(HIDDEN_SENTENCES[:3]))]
QUESTIONS = (
    "SAL-7731 慶弔休暇",
    "鳩山紫織の問い合わせ先は？",
    "慶弔休暇は何日ですか",
    "年次有給休暇は何日前までに申請しますか",
    "ZP-2041の保証期間は？",
    "QC-2031 の抜取検査",
    "仕入先が東洋精工の部品は何品目ありますか",
    "単価がいちばん高い品番は？",
    "P-100とP-200ではどちらの単価が高いですか",
    "仕入先が南海工業の部品は何品目ありますか",  # a supplier only hidden rows name
)
CALLERS = {"staff": ["all-employees"], "engineer": ["engineering"],
           "reviewer": ["all-employees", "engineering", "reviewers"]}
ENTITY_NAMES = ("ZP-2041", "QC-2031", "SAL-7731", "慶弔休暇規程")
# The plans a search takes (kb_search.search): (EXACT_PASSAGES, MAX_CANDIDATES, SHARE_BASE).
# Every caller here reads a few passages: the exact plan; 0 sends each to the index plan, a
# budget of 3 candidates makes its seeds and tiers choose, and a share base of 1 leaves out the
# terms in most of the caller's passages.
PLANS = {"exact": (10**6, 400, 1_000), "index": (0, 3, 1)}
# A response's figures of time, and its id: left out of the comparison (docs/security.md).
# `since` and `citations_since` are the gap report's window, which ends now.
VOLATILE = {"query_id", "since", "citations_since"}


@dataclasses.dataclass
class Installation:
    url: str
    root: Path
    settings: Settings
    tokens: dict[str, str]
    instance: dg.DagsterInstance
    base: str  # the service
    before: dict[str, dict]  # the responses under each plan, with the first hidden documents

    def ingest(self) -> None:
        summary = ingest_paths([self.root], None, self.settings, self.instance)
        assert not summary.failed, summary

    def write_hidden(self, documents: list[tuple[str, str, list[str]]]) -> None:
        """Replace every hidden document by `documents`, (folder, name, sentences)."""
        for folder in HIDDEN_FOLDERS:
            for file in (self.root / folder).glob("*.md"):
                file.unlink()
        for folder, name, sentences in documents:
            (self.root / folder / f"{name}.md").write_text(
                f"# {name}\n\n## 第1条\n" + "\n".join(sentences) + "\n", encoding="utf-8")
        self.ingest()


@pytest.fixture(scope="module")
def installation(admin_url: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Installation]:
    name = f"t_nonint_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")  # generated name
    url = admin_url.replace("/postgres?", f"/{name}?")
    root = tmp_path_factory.mktemp("nonint") / "docs"
    for folder, groups in ACCESS.items():
        (root / folder).mkdir(parents=True)
        (root / folder / "_access.toml").write_text(f"groups = {json.dumps(groups)}\n")
    for rel, text in VISIBLE.items():
        (root / rel).write_text(text, encoding="utf-8")
    service = ServiceSettings(rate_limit_per_minute=0, reviewer_group="reviewers")
    settings = Settings(home=Path("/tmp"), database_url=url, docs_dirs=(root,),
                        embedder=EmbedderSettings("hashing"), service=service)
    with connect(url, autocommit=True) as conn:
        tokens = {caller: TokenStore.create(conn, caller, groups)
                  for caller, groups in CALLERS.items()}
    with dg.instance_for_test() as instance:
        kb = Installation(url, root, settings, tokens, instance, "", {})
        kb.write_hidden(FIRST_HIDDEN)
        with served(create_app(settings), free_port()) as base:
            yield dataclasses.replace(kb, base=base)
    shutil.rmtree(root, ignore_errors=True)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _stable(value: object) -> object:
    """A response without its figures of time (VOLATILE, and every `*_ms`)."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items()
                if k not in VOLATILE and not k.endswith("_ms")}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _mcp(client: httpx.Client, base: str, tool: str, arguments: dict) -> object:
    response = client.post(f"{base}/mcp", json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}},
        headers={"Accept": "application/json, text/event-stream"})
    assert response.status_code == 200, response.text
    return response.json()["result"].get("structuredContent")


def responses(kb: Installation) -> dict[tuple, object]:
    """Every response the callers get, by (caller, door, what was asked)."""
    with connect(kb.url, autocommit=True) as conn:
        conn.execute("DELETE FROM query_log")  # the query log held fixed: only this round's
    seen: dict[tuple, object] = {}
    for caller, token in kb.tokens.items():
        with httpx.Client(base_url=kb.base, timeout=60,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            for question in QUESTIONS:
                for mode in ("hybrid", "keyword", "vector", "graph"):
                    response = client.post("/v1/search",
                                           json={"query": question, "mode": mode, "k": 10})
                    seen[caller, "search", mode, question] = (response.status_code,
                                                              _stable(response.json()))
                for mode in ("auto", "flash", "deep"):
                    response = client.post("/v1/ask", json={"question": question, "mode": mode})
                    seen[caller, "ask", mode, question] = (response.status_code,
                                                           _stable(response.json()))
                seen[caller, "mcp search", question] = _stable(
                    _mcp(client, kb.base, "search", {"query": question, "k": 10}))
                seen[caller, "mcp ask", question] = _stable(
                    _mcp(client, kb.base, "ask", {"question": question}))
            for name in ENTITY_NAMES:
                found = client.get("/v1/entities", params={"name": name})
                seen[caller, "entities", name] = (found.status_code, _stable(found.json()))
                for entity in found.json().get("entities", []) if found.is_success else []:
                    card = client.get(f"/v1/entities/{entity['id']}")
                    seen[caller, "card", entity["id"]] = (card.status_code, _stable(card.json()))
            if caller == "reviewer":
                gaps = client.get("/v1/gaps")
                seen[caller, "gaps"] = (gaps.status_code, _stable(gaps.json()))
    return seen


def differences(before: dict, after: dict) -> list[tuple]:
    return [key for key in before.keys() | after.keys() if before.get(key) != after.get(key)]


@pytest.fixture
def plan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    _use_plan(monkeypatch, *PLANS[request.param])
    return request.param


def _use_plan(monkeypatch: pytest.MonkeyPatch, exact_passages: int, max_candidates: int,
              share_base: int) -> None:
    monkeypatch.setattr(kb_search.search, "EXACT_PASSAGES", exact_passages)
    monkeypatch.setattr(kb_search.search, "MAX_CANDIDATES", max_candidates)
    monkeypatch.setattr(kb_search.search, "SHARE_BASE", share_base)


_HIDDEN_DOCUMENTS = st.lists(
    st.tuples(st.sampled_from(HIDDEN_FOLDERS),
              st.sampled_from(["給与規程", "役員規程", "人事メモ", "評価基準"]),
              st.lists(st.sampled_from(HIDDEN_SENTENCES), min_size=1, max_size=5)),
    max_size=4, unique_by=lambda d: (d[0], d[1]))


@pytest.mark.parametrize("plan", list(PLANS), indirect=True)
@hypothesis_settings(max_examples=5, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hidden=_HIDDEN_DOCUMENTS)
def test_documents_a_caller_may_not_read_change_nothing_it_is_told(installation, plan, hidden):
    """Added, rewritten, re-permissioned or deleted: the hidden documents of each draw replace
    those of the last, and every response is the one before any of them changed."""
    kb = installation
    if plan not in kb.before:
        kb.write_hidden(FIRST_HIDDEN)
        kb.before[plan] = responses(kb)
    kb.write_hidden(hidden)
    assert differences(kb.before[plan], responses(kb)) == []


def _replay_attack(kb: Installation) -> dict[str, float | None]:
    """Issue 66's attack: an all-employees caller's keyword score for 「<code> 慶弔休暇」, by
    code: SAL-7731 is in two hr passages, SAL-7732 in one, the rest in none."""
    scores = {}
    with httpx.Client(base_url=kb.base, timeout=60,
                      headers={"Authorization": f"Bearer {kb.tokens['staff']}"}) as client:
        for code in ("SAL-7730", "SAL-7731", "SAL-7732", "SAL-7733"):
            response = client.post("/v1/search", json={"query": f"{code} 慶弔休暇",
                                                       "mode": "keyword", "k": 1})
            hits = response.json()["hits"]
            scores[code] = hits[0]["score"] if hits else None
    return scores


@pytest.mark.parametrize("plan", list(PLANS), indirect=True)
def test_the_replayed_attack_learns_nothing(installation, plan):
    installation.write_hidden(FIRST_HIDDEN)
    scores = _replay_attack(installation)
    assert scores["SAL-7730"] is not None
    assert len(set(scores.values())) == 1, scores


# Each statistic counted over the whole index again, as a change to the statement that counts it:
# (plan, query, what is replaced, by what).
MUTATIONS = {
    "term document frequency": ("exact", "search_scope",
                                "SELECT coalesce(c.df, 0)::bigint",
                                "SELECT coalesce((SELECT sum(k.df) FROM keyword_df k"
                                " WHERE k.term = t.term), 0)::bigint"),
    "passage count": ("exact", "search_scope",
                      "SELECT coalesce((SELECT df FROM counts WHERE term = ''), 0)",
                      "SELECT coalesce((SELECT sum(df) FROM keyword_df WHERE term = '')"
                      ", 0)"),
    "plan choice": ("exact", "search_scope",
                    "r.n <= %(exact_passages)s AS exact",
                    "(SELECT sum(df) FROM keyword_df WHERE term = '')"
                    " <= %(exact_passages)s AS exact"),
    "seeds and tiers": ("index", "keyword_leg",
                        "SELECT query, df, sum(df) OVER (ORDER BY idf DESC, term) AS running",
                        "SELECT query, df, sum((SELECT sum(k.df) FROM keyword_df k"
                        " WHERE k.term = informative.term)) OVER (ORDER BY idf DESC, term)"
                        " AS running"),
    "unknown terms": ("exact", "unknown_terms",
                      "AND g.group_name = ANY(%(groups)s::text[])",
                      "AND %(groups)s::text[] IS NOT NULL"),
    "table rows": ("exact", "tables_of_documents",
                   "WHERE t.document_id = ANY(%(documents)s::bigint[]) AND c.allowed_groups && "
                   "%(groups)s::text[]",
                   "WHERE %(documents)s::bigint[] IS NOT NULL AND %(groups)s::text[] IS NOT NULL"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_the_property_fails_when_any_one_statistic_counts_the_whole_index(
        installation, monkeypatch, mutation):
    where, name, old, new = MUTATIONS[mutation]
    statements = kb_core.queries._load()
    assert old in statements[name], (name, old)
    kb = installation
    kb.write_hidden(FIRST_HIDDEN)
    exact_passages, max_candidates, share_base = PLANS[where]
    if mutation == "plan choice":  # the whole index now: exact, until it grows
        with connect(kb.url, autocommit=True) as conn:
            exact_passages = conn.execute(
                "SELECT sum(df) FROM keyword_df WHERE term = ''").fetchone()[0]
        max_candidates, share_base = PLANS["index"][1:]
    _use_plan(monkeypatch, exact_passages, max_candidates, share_base)
    monkeypatch.setitem(statements, name, statements[name].replace(old, new))
    before = responses(kb)
    kb.write_hidden([*FIRST_HIDDEN, ("exec", "人事メモ", list(HIDDEN_SENTENCES) * 2)])
    assert differences(before, responses(kb)), mutation

