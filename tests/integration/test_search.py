"""Hybrid retrieval over a real index: codes, 2-grams, synonyms, fusion and permissions."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kb_core.database import connect
from kb_core.embeddings import embedder_for_index
from kb_core.generations import live_generation, use_generation
from kb_core.queries import query
from kb_core.settings import EmbedderSettings
from kb_pipeline.in_process import ingest_paths
from kb_search.corrections import approve_correction
from kb_search.search import (
    MODES,
    Searcher,
    configure_search_session,
    hybrid_search,
    pooled_search_connection,
)
from kb_search.sources import document_view, indexed_original
from kb_search.synonyms import Synonyms
from tests import configured
from tests.conftest import wal_position

CORPUS = {
    "all/QC-2031_報告書.md": "# QC-2031 品質検査報告書\n\n対象製品ZP-2041の吐出量が"
                             "規格を下回った。",
    "all/QC-2013_報告書.md": "# QC-2013 品質検査報告書\n\nZP-2014のOリングから漏れ。過去の類似事例"
                             "として品質検査報告書を参照した。品質検査の手順を見直す。",
    "all/都庁.md": "# 見学会\n\n東京都庁の展望室を見学する。集合は正面玄関。",
    "all/東京.md": "# 出張\n\n東京の本社から都庁方面へ移動する。東京駅集合。都庁は遠い。東京。",
    "all/就業規則.md": "# 就業規則\n\n## 第22条（副業）\n副業は届出制とし、"
                       "開始の30日前までに届け出る。",
    "all/寮.md": "# 福利厚生\n\n独身寮の入居資格は入社3年目までとする。",
    "all/休暇.md": "# 休暇規程\n\n年次有給休暇は取得日の3営業日前までに申請する。",
    "all/タイ工場.md": "# タイ工場\n\nโรงงานในประเทศไทย の稼働率は95%である。",
    "all/VPN.md": "# リモート接続\n\nVPN clientを起動し、社員番号でsign inする。",
    "secret/給与.md": "# 給与規程\n\n給与支給日は毎月25日とする。ZP-2041担当者の手当を含む。",
}


@pytest.fixture
def corpus(settings, instance, tmp_path) -> Path:
    root = tmp_path / "corpus"
    for rel, text in CORPUS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    (root / "all" / "_access.toml").write_text('groups = ["all-employees"]\n')
    (root / "secret" / "_access.toml").write_text('groups = ["hr"]\n')
    summary = ingest_paths([root], None, settings, instance)
    assert summary.ingested == len(CORPUS)
    return root


@pytest.fixture
def searcher(tmp_path) -> Searcher:
    synonyms = tmp_path / "synonyms.txt"
    synonyms.write_text("有給 = 年休 = 年次有給休暇\n", encoding="utf-8")
    return Searcher(EmbedderSettings("hashing"), Synonyms(synonyms))


@pytest.fixture
def beside(database_url) -> Iterator[psycopg.Connection]:
    """A second search connection to the test's database, as the service's pool gives one."""
    with connect(database_url, autocommit=True) as c:
        pooled_search_connection(c)
        yield c


def top_paths(conn, searcher, question, groups=("all-employees",), mode="hybrid", k=5):
    configure_search_session(conn)
    result, _ = searcher.search(conn, searcher.prepare(question, mode), list(groups), k, mode)
    return [Path(h.path).name for h in result.hits]


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_code_question_finds_that_code_not_a_look_alike(corpus, conn, searcher, mode):
    assert top_paths(conn, searcher, "QC-2031 はどこ？", mode=mode)[0] == "QC-2031_報告書.md"
    assert top_paths(conn, searcher, "QC-2013の内容", mode=mode)[0] == "QC-2013_報告書.md"


@pytest.mark.parametrize("written", ["ZP‐2041", "ＺＰ－２０４１", "zp−2041", "ZP – 2041", "ZP2041"])
def test_dash_and_width_variants_of_a_code_match(corpus, conn, searcher, written):
    assert top_paths(conn, searcher, f"{written}の吐出量", mode="keyword")[0] == "QC-2031_報告書.md"


def test_thai_text_matches_by_2_grams(corpus, conn, searcher):
    assert top_paths(conn, searcher, "ประเทศไทย", mode="keyword")[0] == "タイ工場.md"


def test_mixed_japanese_and_english_question_matches(corpus, conn, searcher):
    assert top_paths(conn, searcher, "VPN clientでsign inする方法", mode="keyword")[0] == "VPN.md"


def test_adjacent_bigrams_rank_above_scattered_ones(corpus, conn, searcher):
    assert top_paths(conn, searcher, "東京都庁", mode="keyword")[:2] == ["都庁.md", "東京.md"]


def test_kanji_article_number_matches_arabic_numerals(corpus, conn, searcher):
    assert top_paths(conn, searcher, "第二十二条は？", mode="keyword")[0] == "就業規則.md"


def test_two_character_word_matches(corpus, conn, searcher):
    assert top_paths(conn, searcher, "副業", mode="keyword") == ["就業規則.md"]


def test_one_character_question_still_finds_passages(corpus, conn, searcher):
    assert top_paths(conn, searcher, "寮", mode="keyword") == ["寮.md"]


def test_synonyms_expand_questions_and_reload_when_the_file_changes(corpus, conn, searcher):
    assert top_paths(conn, searcher, "年休", mode="keyword") == ["休暇.md"]
    searcher.synonyms.path.write_text("# emptied\n", encoding="utf-8")
    assert top_paths(conn, searcher, "年休", mode="keyword") == []


def test_hits_report_their_rank_in_each_leg(corpus, conn, searcher):
    configure_search_session(conn)
    result, evidence = searcher.search(conn, searcher.prepare("有給休暇の申請期限"),
                                       ["all-employees"], 5, "hybrid")
    top = result.hits[0]
    assert top.path.endswith("休暇.md")
    assert top.ranks.vector is not None and top.ranks.keyword is not None
    assert evidence[0].similarity is not None and evidence[0].keyword_score > 0
    assert [h.rank for h in result.hits] == list(range(1, len(result.hits) + 1))


def test_keyword_mode_reports_no_vector_ranks_and_vector_mode_no_keyword_ranks(
    corpus, conn, searcher
):
    configure_search_session(conn)
    prepared = searcher.prepare("年次有給休暇")
    keyword, _ = searcher.search(conn, prepared, ["all-employees"], 5, "keyword")
    vector, _ = searcher.search(conn, prepared, ["all-employees"], 5, "vector")
    assert keyword.hits and all(h.ranks.vector is None for h in keyword.hits)
    assert vector.hits and all(h.ranks.keyword is None for h in vector.hits)


# The modes that read passages' text; the graph leg reads their entities, and is held to the
# caller's groups in tests/integration/test_entity_graph.py (and by the property below).
TEXT_MODES = ("hybrid", "vector", "keyword")


def test_callers_without_a_group_see_nothing_of_its_documents(corpus, conn, searcher):
    for mode in TEXT_MODES:
        assert "給与.md" not in top_paths(conn, searcher, "給与支給日", mode=mode, k=20)
        assert top_paths(conn, searcher, "給与支給日", groups=("hr",), mode=mode)[0] == "給与.md"
    assert top_paths(conn, searcher, "給与支給日", groups=(), k=20) == []


_GROUPS = ["all-employees", "hr", "engineering", "qa", "executives"]
# (exact_passages, wide_passages) for the index plan (HNSW, the keyword leg's budgeted
# candidates), as for a caller who may read most passages (its groups checked on each row) and
# for one who may read fewer (the groups' postings intersected with the terms'), and for the
# exact plan, as for one who may read few.
PLANS = ((-1, 0), (-1, 10**9), (10**9, 0))


@pytest.mark.parametrize("mode", MODES)
def test_every_plan_returns_the_same_passages_to_every_caller(corpus, conn, beside, searcher,
                                                             mode):
    """With the legs one after the other on one connection, or at once on two."""
    # On a corpus this small HNSW and the keyword leg's budget miss nothing: any difference
    # would be the plans filtering differently.
    configure_search_session(conn)
    for caller in ([], ["all-employees"], ["hr"], ["all-employees", "hr"], ["nobody"]):
        for question in ("給与支給日", "東京都庁の見学", "ZP-2041", "VPN sign in", "の"):
            prepared = searcher.prepare(question, mode)
            found = [
                [(hit.chunk_id, hit.score, hit.ranks) for hit in hybrid_search(
                    conn, prepared.plan, prepared.vector, caller, 50, mode,
                    exact_passages=exact, wide_passages=wide, beside=side)[0].hits]
                for exact, wide in PLANS for side in (None, beside)]
            assert all(f == found[0] for f in found), (caller, question)


# Every document's groups, and a caller's: the property tests' draws.
_ASSIGNMENTS = st.lists(st.sets(st.sampled_from(_GROUPS), max_size=3), min_size=len(CORPUS),
                        max_size=len(CORPUS))
_CALLERS = st.sets(st.sampled_from(_GROUPS), max_size=3)
_QUESTIONS = st.sampled_from([
    "ZP-2041", "QC-2031 はどこ？", "東京都庁", "第22条", "寮", "年休", "給与支給日",
    "品質検査報告書", "副業の届出", "の", "a",
]) | st.text(alphabet="品質検査給与東京都庁年休寮ZP-2041 の", min_size=1, max_size=12)


@hypothesis_settings(max_examples=1000, deadline=None,  # issue 6: at least 1,000 examples
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    assignment=_ASSIGNMENTS,
    caller=_CALLERS,
    question=_QUESTIONS,
    mode=st.sampled_from(MODES),
    plan=st.sampled_from(PLANS),
    legs_at_once=st.booleans(),
    opened=st.tuples(st.integers(0, len(CORPUS) - 1), st.integers(0, 10**6)),
)
def test_no_hit_or_source_ever_comes_from_a_document_outside_the_callers_groups(
    corpus, conn, beside, searcher, assignment, caller, question, mode, plan, legs_at_once,
    opened
):
    """Search under every plan, its legs one after the other or at once on two connections,
    and opening a source (a document's view, a passage with its neighbours, the original
    file), after every re-permission."""
    uris = [str(corpus / rel) for rel in sorted(CORPUS)]
    for uri, groups in zip(uris, assignment, strict=True):
        conn.execute(query("regroup_document"),
                     {"uri": uri, "groups": sorted(groups), "rule": "test"})
    allowed = {uri: set(groups) for uri, groups in zip(uris, assignment, strict=True)}
    configure_search_session(conn)
    prepared = searcher.prepare(question, mode)
    result, _ = hybrid_search(conn, prepared.plan, prepared.vector, sorted(caller), 20, mode,
                              exact_passages=plan[0], wide_passages=plan[1],
                              beside=beside if legs_at_once else None)
    for hit in result.hits:
        assert allowed[hit.source_uri] & caller, (hit.path, allowed[hit.source_uri], caller)

    documents = dict(conn.execute("SELECT source_uri, id FROM documents").fetchall())
    for uri in uris:
        view = document_view(conn, documents[uri], sorted(caller))
        assert (view is not None) == bool(allowed[uri] & caller), (uri, caller)
    # A passage asked for under a document, its own or another's.
    chunks = conn.execute("SELECT c.id, d.source_uri FROM chunks c "
                          "JOIN documents d ON d.id = c.document_id ORDER BY c.id").fetchall()
    chunk_id, owner = chunks[opened[1] % len(chunks)]
    uri = uris[opened[0]]
    view = document_view(conn, documents[uri], sorted(caller), chunk_id)
    assert (view is not None) == (uri == owner and bool(allowed[uri] & caller))
    assert (indexed_original(conn, documents[uri], sorted(caller)) is not None) == bool(
        allowed[uri] & caller)


# Fewer examples than the primary's: each waits for the replica to replay its re-permission.
@hypothesis_settings(max_examples=300, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    assignment=_ASSIGNMENTS,
    caller=_CALLERS,
    question=_QUESTIONS,
    mode=st.sampled_from(MODES),
)
def test_no_hit_from_a_replica_ever_comes_from_a_document_outside_the_callers_groups(
    corpus, conn, searcher, reads, assignment, caller, question, mode
):
    """The property above on the replica path: documents re-permissioned on the primary, the
    fence moved as the service moves it, and the search answered by the streaming replica
    once it has replayed the change."""
    uris = [str(corpus / rel) for rel in sorted(CORPUS)]
    for uri, groups in zip(uris, assignment, strict=True):
        conn.execute(query("regroup_document"),
                     {"uri": uri, "groups": sorted(groups), "rule": "test"})
    allowed = {uri: set(groups) for uri, groups in zip(uris, assignment, strict=True)}
    fence = wal_position(conn)
    reads.fence.advance(fence)
    replica = reads.replicas[0]
    with replica.pool.connection() as replica_conn:
        while replica_conn.execute(query("replay_position")).fetchone()[0] < fence:
            time.sleep(0.002)
    served = replica.served
    prepared = searcher.prepare(question, mode)
    result, _ = reads.run_paired(
        lambda c, beside: searcher.search(c, prepared, sorted(caller), 20, mode, beside))
    assert replica.served == served + 1
    for hit in result.hits:
        assert allowed[hit.source_uri] & caller, (hit.path, allowed[hit.source_uri], caller)


def test_reranker_reorders_the_fused_hits(corpus, conn, monkeypatch):
    from kb_search.rerankers import make_reranker
    from tests.fake_servers import fake_server

    def reverse(body: dict) -> tuple[int, dict]:
        n = len(body["documents"])
        results = [{"index": i, "relevance_score": (i + 1) / n} for i in reversed(range(n))]
        return 200, {"id": "x", "results": results[: body["top_n"]]}

    with fake_server({"/v2/rerank": reverse}) as fake:
        monkeypatch.setenv("COHERE_BASE_URL", fake.url)
        monkeypatch.setenv("COHERE_API_KEY", "test-key")
        plain = Searcher(EmbedderSettings("hashing"), Synonyms(Path("/nonexistent")))
        reranked = Searcher(EmbedderSettings("hashing"), plain.synonyms,
                            make_reranker(configured.reranker("cohere")))
        configure_search_session(conn)
        fused, _ = plain.search(conn, plain.prepare("品質検査報告書"), ["all-employees"], 20)
        result, _ = reranked.search(conn, reranked.prepare("品質検査報告書"), ["all-employees"], 3)
    assert [h.chunk_id for h in result.hits] == [h.chunk_id for h in fused.hits][::-1][:3]
    assert [h.rank for h in result.hits] == [1, 2, 3]


def test_failing_reranker_keeps_the_fused_order(corpus, conn, monkeypatch):
    from kb_search.rerankers import make_reranker
    from tests.fake_servers import fake_server

    with fake_server({"/v2/rerank": lambda body: (500, {"message": "down"})}) as fake:
        monkeypatch.setenv("COHERE_BASE_URL", fake.url)
        monkeypatch.setenv("COHERE_API_KEY", "test-key")
        plain = Searcher(EmbedderSettings("hashing"), Synonyms(Path("/nonexistent")))
        reranked = Searcher(EmbedderSettings("hashing"), plain.synonyms,
                            make_reranker(configured.reranker("cohere")))
        configure_search_session(conn)
        fused, _ = plain.search(conn, plain.prepare("品質検査報告書"), ["all-employees"], 3)
        result, _ = reranked.search(conn, reranked.prepare("品質検査報告書"), ["all-employees"], 3)
    assert [h.chunk_id for h in result.hits] == [h.chunk_id for h in fused.hits]


def _live_tables(conn: psycopg.Connection) -> None:
    # COPY and ANALYZE need the live generation's tables, not the views onto them in public.
    use_generation(conn, live_generation(conn).id)


def test_unknown_terms_are_read_from_the_statistics_of_the_callers_sets(conn):
    # 20,000 synthetic chunks of one group, one of which holds the rare term: which terms the
    # caller's passages hold is read from the keyword statistics, never from the chunks, and
    # says what the chunks say.
    _live_tables(conn)
    conn.execute(
        "INSERT INTO documents (source_uri, path, title, mime, size_bytes, checksum, "
        "pipeline_version, allowed_groups, revision_source, file_mtime) VALUES "
        "('/x', 'x', 'x', 'text/plain', 1, 'c', 'v', '{g}', 'mtime', now())"
    )
    conn.execute(
        "INSERT INTO chunks (document_id, chunk_index, heading, content, search_text, "
        "token_count, text_sha256, allowed_groups, keywords) "
        "SELECT d.id, i, '', 'c', 'c', 10, md5(i::text), '{g}', "
        "  CASE WHEN i = 7 THEN '''zq-9999'' ''規程''' ELSE '''規程'' ''休暇''' END::tsvector "
        "FROM documents d, generate_series(0, 19999) i"
    )
    terms = {"terms": ["zq-9999", "休暇", "zz-0000"]}
    plan = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN " + query("unknown_terms"), {**terms, "groups": ["g"]}))
    assert " chunks" not in plan, plan

    def unknown(groups: list[str]) -> set[str]:
        return {t for (t,) in conn.execute(query("unknown_terms"), {**terms, "groups": groups})}

    assert unknown(["g"]) == {"zz-0000"}
    assert unknown(["h", "g"]) == {"zz-0000"}
    assert unknown(["h"]) == {"zq-9999", "休暇", "zz-0000"}


def test_a_set_of_groups_first_written_during_a_search_counts_nothing_it_may_not_read(
        corpus, conn, searcher, database_url, monkeypatch):
    """search_scope and the keyword leg are two statements, each reading its own snapshot: a
    document of a new set of groups written between them would be counted by the second, so
    the second must count nothing (search_scope counts the terms too)."""
    from kb_search import search

    caller = ["all-employees", "hr"]
    prepared = searcher.prepare("年次有給休暇の申請", "keyword")

    def told() -> list[tuple]:  # the evidence too: answerability reads it
        result, evidence = hybrid_search(conn, prepared.plan, None, caller, 5, "keyword")
        return [(hit.chunk_id, hit.score, e.keyword_score, e.coverage)
                for hit, e in zip(result.hits, evidence, strict=True)]

    before = told()
    read = search._rows

    def hidden_written_meanwhile(c: psycopg.Connection, name: str, params: dict) -> list:
        if name == "keyword_leg":
            with connect(database_url, autocommit=True) as writer, writer.transaction():
                _live_tables(writer)
                writer.execute(query("lock_keyword_stats"))
                (document,) = writer.execute(
                    "INSERT INTO documents (source_uri, path, title, mime, size_bytes, checksum, "
                    "pipeline_version, allowed_groups, revision_source, file_mtime) VALUES "
                    "('/hidden', 'hidden', 'h', 'text/plain', 1, 'c', 'v', '{other}', 'mtime', "
                    "now()) RETURNING id").fetchone()
                writer.execute(
                    "INSERT INTO chunks (document_id, chunk_index, heading, content, "
                    "search_text, token_count, text_sha256, allowed_groups, keywords) "
                    "SELECT %s, 0, heading, content, search_text, token_count, 'hidden', "
                    "'{other}', keywords FROM chunks WHERE content LIKE '%%年次有給休暇%%'",
                    (document,))
        return read(c, name, params)

    monkeypatch.setattr(search, "_rows", hidden_written_meanwhile)
    assert told() == before
    assert conn.execute("SELECT 1 FROM group_sets WHERE groups = '{other}'").fetchone()


def test_a_selective_group_filter_still_yields_k_hits(conn):
    # 3,000 chunks of a large group lie next to the question's vector and 30 of a small group
    # far from it: HNSW's first ef_search (400) candidates hold none of the small group, so only
    # an iterative scan finds k of its chunks.
    import numpy as np

    from kb_search.planner import plan_question

    rng = np.random.default_rng(3)
    axis = np.eye(1, 384, dtype=np.float32)[0]

    def around(direction: np.ndarray, count: int) -> np.ndarray:
        points = direction + rng.normal(scale=0.3 / np.sqrt(384), size=(count, 384))
        return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)

    _live_tables(conn)
    document_id = conn.execute(
        "INSERT INTO documents (source_uri, path, title, mime, size_bytes, checksum, "
        "pipeline_version, allowed_groups, revision_source, file_mtime) VALUES "
        "('/x', 'x', 'x', 'text/plain', 1, 'c', 'v', '{big,small}', 'mtime', now()) "
        "RETURNING id"
    ).fetchone()[0]
    rows = [(["big"], v) for v in around(axis, 3000)] + [(["small"], v)
                                                         for v in around(-axis, 30)]
    with conn.cursor().copy(
        "COPY chunks (document_id, chunk_index, heading, content, search_text, token_count, "
        "text_sha256, allowed_groups, keywords) FROM STDIN"
    ) as copy:
        for i, (groups, _) in enumerate(rows):
            copy.write_row((document_id, i, "", "c", "c", 10, str(i), groups, ""))
    ids = [r[0] for r in conn.execute(
        "SELECT id FROM chunks WHERE document_id = %s ORDER BY chunk_index", (document_id,))]
    with conn.cursor().copy(
        "COPY chunk_vectors (chunk_id, view_index, allowed_groups, embedding) FROM STDIN"
    ) as copy:
        for chunk_id, (groups, vector) in zip(ids, rows, strict=True):
            copy.write_row((chunk_id, 0, groups, vector))
    conn.execute("ANALYZE chunks")
    conn.execute("ANALYZE chunk_vectors")
    configure_search_session(conn)
    # On a table this small the planner may rather read the 30 chunks through the groups'
    # index and sort them exactly; make it walk the HNSW graph, as it does at scale.
    conn.execute("SET enable_bitmapscan = off")
    conn.execute("SET enable_seqscan = off")
    plan = plan_question("質問")

    def hits(groups: list[str]) -> int:
        # exact_passages -1: the HNSW plan, as for a caller who may read many passages.
        result, _ = hybrid_search(conn, plan, axis, groups, 10, "vector", exact_passages=-1)
        return len(result.hits)

    assert hits(["small"]) == 10
    conn.execute("SET hnsw.iterative_scan = off")  # the same search without it finds too few
    assert hits(["small"]) < 10


def test_a_code_question_leans_on_the_keyword_leg_when_the_legs_disagree(
    settings, instance, conn, tmp_path, monkeypatch
):
    # Both passages hold the code. The keyword leg ranks the warranty table first; the question
    # vector is the referral's own, so the vector leg ranks it first. Plain RRF ties them.
    from pgvector.psycopg import register_vector

    import kb_search.planner as planner
    from kb_search.planner import plan_question

    root = tmp_path / "corpus" / "lean"
    root.mkdir(parents=True)
    (root / "_access.toml").write_text('groups = ["lean"]\n')
    (root / "a_取扱説明書.md").write_text(
        "# 取扱説明書\n\nZP-2041の保証期間および保証条件は当社の製品保証規定による。",
        encoding="utf-8")
    (root / "b_製品保証規定.md").write_text(
        "# 製品保証規定\n\nZP-2041の保証期間は納入後18か月とし、保証期間は納入日から起算する。",
        encoding="utf-8")
    ingest_paths([root.parent], None, settings, instance)
    register_vector(conn)
    configure_search_session(conn)
    (vector,) = conn.execute(
        "SELECT v.embedding FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id "
        "JOIN documents d ON d.id = c.document_id WHERE d.path LIKE %s",
        ("%a_取扱説明書.md",)).fetchone()

    def fused(question: str) -> list[tuple[str, float, int | None, int | None]]:
        result, _ = hybrid_search(conn, plan_question(question), vector, ["lean"], 2)
        return [(Path(h.path).name, h.score, h.ranks.vector, h.ranks.keyword)
                for h in result.hits]

    (top, top_score, *top_ranks), (second, second_score, *_) = fused("ZP-2041の保証期間は？")
    assert (top, second) == ("b_製品保証規定.md", "a_取扱説明書.md")
    assert top_ranks == [2, 1] and top_score > second_score
    monkeypatch.setattr(planner, "CODE_KEYWORD_WEIGHT", 1.0)
    (_, plain_top, *_), (_, plain_second, *_) = fused("ZP-2041の保証期間は？")
    assert plain_top == plain_second  # without the lean only the chunk id would decide


def test_a_term_only_forbidden_documents_hold_is_unknown_to_the_caller(corpus, conn):
    """The answerability evidence reads only the caller's passages: a document outside its
    groups changes nothing it is told, not even whether "not found" is said."""
    from kb_search.answerability import content_terms
    from kb_search.planner import plan_question

    terms = content_terms(plan_question("給与支給日はいつ？"))

    def unknown(groups: list[str]) -> set[str]:
        return {t for (t,) in conn.execute(query("unknown_terms"),
                                           {"terms": terms, "groups": groups})}

    # 給与.md alone holds them, and it is the one passage all-employees may not read: their
    # document frequency equals what the caller may not read, so they must be searched for.
    assert {"給与", "支給"} <= unknown(["all-employees"])
    assert not {"給与", "支給"} & unknown(["hr"])


def _regrouped(corpus: Path, conn: psycopg.Connection, assignment: list[set[str]], common: str,
               outside: set[int], drawn: set[int]) -> tuple[list[tuple], list[str]]:
    """The corpus given the groups `assignment` draws, `common` too but for the documents
    `outside`: its passages (groups, terms), and the terms `drawn` from theirs with one that
    none holds."""
    uris = [str(corpus / rel) for rel in sorted(CORPUS)]
    for i, (uri, groups) in enumerate(zip(uris, assignment, strict=True)):
        conn.execute(query("regroup_document"), {
            "uri": uri, "groups": sorted(groups if i in outside else groups | {common}),
            "rule": "test"})
    passages = conn.execute(
        "SELECT allowed_groups, tsvector_to_array(keywords) FROM chunks").fetchall()
    lexemes = sorted({term for _, terms in passages for term in terms})
    return passages, sorted({lexemes[i % len(lexemes)] for i in drawn} | {"存在しない語"})


@hypothesis_settings(max_examples=300, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(assignment=_ASSIGNMENTS, common=st.sampled_from(_GROUPS),
       outside=st.sets(st.integers(0, len(CORPUS) - 1), max_size=3), caller=_CALLERS,
       drawn=st.sets(st.integers(0, 10**6), max_size=8))
def test_the_terms_unknown_to_a_caller_are_those_none_of_its_passages_holds(
        corpus, conn, assignment, common, outside, caller, drawn):
    """unknown_terms skips the search for a term more passages hold than the caller may not
    read: the answer is still exactly the terms no passage it may read holds. One group reads
    every document but those `outside`, as all-employees does, so that the skip is taken and
    its edge (a term held by just the passages the caller may not read) is reached."""
    passages, terms = _regrouped(corpus, conn, assignment, common, outside, drawn)
    readable = {term for groups, held in passages if set(groups) & caller for term in held}
    found = {t for (t,) in conn.execute(query("unknown_terms"),
                                        {"terms": terms, "groups": sorted(caller)})}
    assert found == set(terms) - readable


@hypothesis_settings(max_examples=300, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(assignment=_ASSIGNMENTS, common=st.sampled_from(_GROUPS),
       outside=st.sets(st.integers(0, len(CORPUS) - 1), max_size=3),
       caller=st.lists(st.sampled_from(_GROUPS), max_size=4),
       drawn=st.sets(st.integers(0, 10**6), max_size=8))
def test_a_callers_figures_count_each_passage_it_may_read_once(
        corpus, conn, assignment, common, outside, caller, drawn):
    """search_scope adds up the caller's groups, each passage once: a passage of several of
    them is taken off the later groups, read from the sets an earlier group meets or from those
    it does not, whichever are fewer. `common` is of most documents, as all-employees is, so that
    a later group's sets are mostly met by it, or mostly not; the caller's groups come repeated
    and unsorted as a request's may."""
    passages, terms = _regrouped(corpus, conn, assignment, common, outside, drawn)
    readable = [set(held) for groups, held in passages if set(groups) & set(caller)]
    count, dfs, _, _ = conn.execute(query("search_scope"), {
        "groups": caller, "terms": terms, "exact_passages": 5000, "names": ""}).fetchone()
    assert count == len(readable)
    assert dfs == [sum(term in held for held in readable) for term in terms]


# The permission property above, with learned facts (approved corrections): corrections
# of one document, of several sharing a group, and of documents of different groups.
FACTS = {
    "給与支給日は毎月20日に変更された。": ["secret/給与.md"],
    "副業の届出と年休の申請は同じ様式で行う。": ["all/就業規則.md", "all/休暇.md"],
    "QC-2031の対象ZP-2041の給与手当は廃止された。": ["all/QC-2031_報告書.md", "secret/給与.md"],
    "東京都庁の見学と独身寮の入居は品質検査報告書とは無関係である。": ["all/寮.md", "all/都庁.md"],
}


@pytest.fixture
def learned(corpus: Path, conn: psycopg.Connection) -> dict[str, list[str]]:
    """The corpus with FACTS approved: each fact's source_uri and its documents'."""
    facts = {}
    for text, rels in FACTS.items():
        uris = [str(corpus / rel) for rel in rels]
        correction_id = conn.execute(
            "INSERT INTO corrections (correction, question, answer, submitted_kind, "
            "submitted_by, submitter_name) VALUES (%s, %s, '', 'cli', 'test', 'test') "
            "RETURNING id", (text, text)).fetchone()[0]
        conn.execute(
            "INSERT INTO correction_sources (correction_id, position, source_uri, checksum, "
            "path, heading, passage) SELECT %s, row_number() OVER (), source_uri, checksum, "
            "path, '', '' FROM documents WHERE source_uri = ANY(%s)", (correction_id, uris))
        approve_correction(conn, correction_id, "test",
                           lambda model: embedder_for_index(model, EmbedderSettings("hashing")))
        facts[f"kb-correction:{correction_id}"] = uris
    return facts


@hypothesis_settings(max_examples=300, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    assignment=_ASSIGNMENTS,
    caller=_CALLERS,
    question=_QUESTIONS | st.sampled_from(list(FACTS)),
    mode=st.sampled_from(MODES),
)
def test_no_learned_fact_reaches_a_caller_outside_the_groups_every_corrected_document_grants(
    corpus, learned, conn, searcher, assignment, caller, question, mode
):
    uris = [str(corpus / rel) for rel in sorted(CORPUS)]
    for uri, groups in zip(uris, assignment, strict=True):
        conn.execute(query("regroup_document"),
                     {"uri": uri, "groups": sorted(groups), "rule": "test"})
    allowed = {uri: set(groups) for uri, groups in zip(uris, assignment, strict=True)}
    for fact, documents in learned.items():
        allowed[fact] = set.intersection(*(allowed[uri] for uri in documents))
    configure_search_session(conn)
    result, _ = searcher.search(conn, searcher.prepare(question, mode), sorted(caller), 20, mode)
    for hit in result.hits:
        assert hit.learned_fact == (hit.source_uri in learned)
        assert allowed[hit.source_uri] & caller, (hit.path, allowed[hit.source_uri], caller)
    groups = dict(conn.execute(query("documents_groups"), {"uris": list(learned)}))
    assert {uri: set(g) for uri, g in groups.items()} == {
        fact: allowed[fact] for fact in learned}


def test_a_learned_fact_is_found_by_each_leg_for_its_documents_groups_only(
        corpus, learned, conn, searcher):
    configure_search_session(conn)
    for mode in TEXT_MODES:  # a learned fact names no entity the graph holds
        result, _ = searcher.search(conn, searcher.prepare("給与支給日は毎月何日", mode), ["hr"],
                                    5, mode)
        fact = next(h for h in result.hits if h.learned_fact)
        assert fact.title == "利用者による訂正（承認済み）" and fact.document_id is None
        assert fact.content.startswith("給与支給日は毎月20日")
        assert fact.heading.startswith("承認: test（")
        result, _ = searcher.search(conn, searcher.prepare("給与支給日は毎月何日", mode),
                                    ["all-employees"], 20, mode)
        assert not [h for h in result.hits if h.content.startswith("給与支給日は毎月20日")]
