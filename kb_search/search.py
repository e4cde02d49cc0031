"""Hybrid retrieval: the vector leg (HNSW, iterative scan) and the 2-gram keyword leg, both
filtered by the caller's groups inside SQL, each a statement of its own (at once on two
connections when the caller has two), and the graph leg (kb_search/graph.py) after them, fused
by Reciprocal Rank Fusion (kb_search/fusion.py)."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import msgspec
import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from kb_core.embeddings import Embedder, embedder_for_index, make_embedder
from kb_core.index_model import recorded_model
from kb_core.queries import query
from kb_core.settings import EmbedderSettings
from kb_search.fusion import PLAIN, Fusion, fuse, fusion_for
from kb_search.graph import graph_leg
from kb_search.passage_reference import PassageRef
from kb_search.planner import QueryPlan, plan_question
from kb_search.rerankers import Candidate, Reranker, rerank_or_fallback
from kb_search.synonyms import Synonyms

__all__ = [
    "MODES",
    "Evidence",
    "PreparedQuery",
    "Ranks",
    "SearchHit",
    "SearchResult",
    "Searcher",
    "configure_search_session",
    "hybrid_search",
    "passage_hits",
    "pooled_search_connection",
]

QUERY_VECTORS = 512  # question embeddings kept (Searcher._query_vector): 1.5 kB each

Mode = Literal["hybrid", "vector", "keyword", "graph"]
MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword", "graph")

# bench/search.py, 100k chunks: recall@50 of the vector leg against exact search rose from
# 0.67 (ef_search 20) to 0.75 (100) and 0.84 (200) for an unfiltered caller, and a caller whose
# group holds 2% of the chunks got 0.79 in ~90 ms below 200 but 1.00 in ~7 ms at 200. At 1M
# chunks (the graph of sql/013_hnsw_build.sql; 30 questions, warm caches) an unfiltered caller's
# recall@10 was 0.833 at 200, 0.960 at 400 and 0.990 at 800, its vector leg's p50 8.7, 11.2 and
# 15.0 ms.
EF_SEARCH = 400
# Candidates each leg contributes to fusion, at most: the vector leg reads 40 embedding views,
# a constant of sql/queries/search.sql, and keeps each chunk once (25 for the median question
# on the samples' index, whose long chunks have several views).
LEG_LIMIT = 50
# A caller who may read at most EXACT_PASSAGES passages is searched exactly: each of its
# passages compared in the vector leg, each holding an informative term scored in the keyword
# leg (sql/queries/search.sql). The exact plan's cost grows with the caller's passages v, the
# index plan's with how far HNSW walks past passages it may not read, i.e. with total / v: they
# meet where v is proportional to sqrt(total). bench/search.py --compare-plans, vector leg p50:
# at 100k chunks as fast as the index plan for 1,000 and 3,000 passages, 2.2 times slower for
# 10,000; at 1M chunks (its timing, 40 questions), hybrid p50 120 ms exact against 311 ms index
# for 10,000 passages, 2.8 s against 143 ms for 100,000. The plan is chosen by the caller's own
# passages alone, so that nobody's documents but its own choose it (docs/security.md): this is
# the meeting point at 100k (16 * sqrt(100k)); at 1M a caller of 5,000 to 16,000 passages takes
# the index plan, where the exact one was the faster.
EXACT_PASSAGES = 5_000
# The keyword leg's tiers check the groups of a caller who may read at least this many passages
# on each row their terms find, and intersect the groups' postings with the terms' for any
# other (sql/queries/search.sql). The first costs about a + b / share, the second c + d * share;
# bench/search.py --compare-plans times both for each caller and says where they meet. At 1M
# chunks, since the index on keywords and groups (sql/014), keyword leg p50: checking each row
# 26.4 ms for the caller who may read every passage and 65.0 for a tenth; intersecting 33.4 and
# 22.7: they meet at a share of 0.63, 630,000 passages. At 100k intersecting is the cheaper at
# every share timed (14.7 against 16.4 ms for every passage). Counted in passages, as the exact
# plan is; both plans take the same candidates, so this only moves the time.
WIDE_PASSAGES = 630_000
MAX_TERMS = 16  # informative query terms the keyword leg searches for
# A term in more than MAX_SHARE of the caller's chunks is not informative, the share taken of
# at least SHARE_BASE chunks: of a few dozen, a share says little (of the 35 passages the
# samples' engineers may read, a third hold QC-2031's 2-grams, and leaving those out lost the
# report's own passages). A caller who may read fewer is searched exactly (EXACT_PASSAGES), so
# this costs no more than its passages.
MAX_SHARE = 0.3
SHARE_BASE = 1_000
# Keyword candidates scored per query (and the seed terms' df budget). At 100k chunks 1,000
# candidates took the keyword leg's p50 to ~50 ms, 400 kept it near 15 ms; since tsvectors are
# kept inside their rows (sql/006_inline_keywords.sql) a candidate costs ~16 µs (reading its
# row, then one match per term), the leg ~6 ms.
MAX_CANDIDATES = 400
RERANK_CANDIDATES = 20  # fused hits a reranker reorders

log = logging.getLogger(__name__)


class Ranks(msgspec.Struct):
    vector: int | None
    keyword: int | None
    graph: int | None = None


class SearchHit(PassageRef):
    """One passage as `kb search` and `POST /v1/search` return it (docs/http-api.md), or a
    learned fact (an approved correction): no document of its own, cited as 利用者による訂正."""

    rank: int
    source_uri: str  # the server's file; `named_by_path` replaces it where a hit leaves
    chunk_index: int
    content: str
    score: float
    ranks: Ranks


class Evidence(msgspec.Struct):
    """Raw relevance signals of a hit, for deciding "not found" (fused scores are only ranks)."""

    similarity: float | None  # cosine similarity of query and passage vectors
    keyword_score: float | None  # BM25 over 2-grams
    coverage: float | None  # share of the question's informative term weight in the passage


class SearchResult(msgspec.Struct):
    query: str
    took_ms: float
    hits: list[SearchHit]


def configure_search_session(conn: psycopg.Connection) -> None:
    """Session settings for search: filtered HNSW scans that keep going until k rows pass the
    filter, and a plan made for each statement's own parameters.

    psycopg prepares a statement after it has run five times, and PostgreSQL may then switch
    to a generic plan that cannot see the terms' frequencies or the groups (at 100k chunks one
    took hybrid search from ~45 ms to ~850 ms before the statement chose its paths itself).
    `hybrid_search`'s statements alone ask for their generic plans.
    """
    conn.execute(f"SET hnsw.ef_search = {int(EF_SEARCH)}")
    conn.execute("SET hnsw.iterative_scan = 'relaxed_order'")
    conn.execute("SET plan_cache_mode = force_custom_plan")
    # No parallel workers: a search is small, and a plan's branch that a condition switches
    # off (search.sql's plan per caller) still started its workers, ~8 ms on two cores.
    conn.execute("SET max_parallel_workers_per_gather = 0")


def pooled_search_connection(conn: psycopg.Connection) -> None:
    """A pool's `configure`: vector types and search settings, the connection left idle."""
    register_vector(conn)
    configure_search_session(conn)
    conn.commit()


def hybrid_search(
    conn: psycopg.Connection,
    plan: QueryPlan,
    query_vector: np.ndarray | None,
    groups: list[str],
    k: int = 10,
    mode: Mode = "hybrid",
    fusion: Fusion = PLAIN,
    max_candidates: int | None = None,
    exact_passages: int | None = None,
    wide_passages: int | None = None,
    beside: psycopg.Connection | None = None,
) -> tuple[SearchResult, list[Evidence]]:
    """The top `k` passages the caller's groups may see, best first, with their evidence; the
    legs fused as `fusion` weighs them. Given a second connection to the same server `beside`,
    the vector leg runs on it while the keyword leg runs on `conn`. bench/search.py lifts
    `max_candidates` to score every passage holding an informative term, against which the
    keyword leg's candidates are measured, and moves `exact_passages` and `wide_passages` to
    time every plan for one caller. Every figure that weighs or plans is counted over the
    caller's passages (search_scope)."""
    started = time.perf_counter()
    # Read here, not bound as defaults: the non-interference tests move them to reach every
    # plan on a small corpus (tests/integration/test_non_interference.py).
    max_candidates = MAX_CANDIDATES if max_candidates is None else max_candidates
    exact_passages = EXACT_PASSAGES if exact_passages is None else exact_passages
    wide_passages = WIDE_PASSAGES if wide_passages is None else wide_passages
    use_vector = mode in ("hybrid", "vector") and query_vector is not None
    use_keyword = mode in ("hybrid", "keyword")
    use_graph = mode in ("hybrid", "graph")
    terms = plan.terms
    term_texts = [t.term for t in terms]
    with conn.transaction():
        conn.execute(_ONE_PLAN)
        readable, dfs, exact, things = conn.execute(query("search_scope"), {
            "groups": groups, "terms": term_texts if use_keyword else [],
            "exact_passages": exact_passages,
            "names": "\x1f".join(plan.names if use_graph else [])}, prepare=True).fetchone()
        keyword_params = {
            "terms": term_texts,
            "weights": [t.weight for t in terms],
            "prefixes": [t.prefix for t in terms],
            "phrase_ids": [t.phrase for t in terms],
            "phrases": plan.phrases,
            "groups": groups, "readable": readable, "dfs": dfs,
            "exact": exact, "max_terms": MAX_TERMS, "max_share": MAX_SHARE,
            "share_base": SHARE_BASE,
            "max_candidates": max_candidates, "wide_passages": wide_passages,
            "code_query": plan.code_query, "leg_limit": LEG_LIMIT,
        }
        vector_params = {"query_vector": query_vector, "groups": groups, "exact": exact,
                         "code_query": plan.code_query, "vector_limit": LEG_LIMIT}
        vector: list[tuple] = []
        keyword: list[tuple] = []
        if use_keyword and use_vector and beside is not None:
            # The legs at once, each on its own backend: a search takes about as long as its
            # slower leg, mostly the keyword leg, which runs here (the other pays the round
            # trips of a transaction of its own). `conn`'s transaction holds the lock on
            # index_settings that a publication must take (Searcher.search), so no generation
            # is published while either leg runs.
            pending = _LEGS.submit(_beside, beside, "vector_leg", vector_params)
            try:
                keyword = _rows(conn, "keyword_leg", keyword_params)
            finally:
                vector = pending.result()
        else:
            if use_vector:
                vector = _rows(conn, "vector_leg", vector_params)
            if use_keyword:
                keyword = _rows(conn, "keyword_leg", keyword_params)
        graph = graph_leg(conn, plan.entities, things, groups, readable, exact,
                          LEG_LIMIT) if use_graph else []
        chosen = fuse(vector, keyword, graph, fusion, plan.keyword_weight, k)
        shown = {row[0]: row for row in _rows(
            conn, "passages", {"ids": [f.id for f in chosen], "groups": groups})}
        # A setting made in a savepoint lasts to the end of the transaction around it.
        conn.execute(_SESSION_PLANS)
    hits, evidence = [], []
    for f in (f for f in chosen if f.id in shown):  # one gone meanwhile is not shown
        hits.append(_hit(shown[f.id], len(hits) + 1, round(f.score, 6),
                         Ranks(vector=f.vector_rank, keyword=f.keyword_rank, graph=f.graph_rank)))
        evidence.append(Evidence(similarity=f.similarity, keyword_score=f.keyword_score,
                                 coverage=f.coverage))
    took_ms = round((time.perf_counter() - started) * 1000, 1)
    return SearchResult(query=plan.question, took_ms=took_ms, hits=hits), evidence


def passage_hits(conn: psycopg.Connection, ids: list[int], groups: list[str],
                 first_rank: int) -> list[SearchHit]:
    """The passages `ids` the caller may read, in that order, as hits ranked from `first_rank`
    that no leg found (a table answer's rows beyond the passages a search offered)."""
    shown = {row[0]: row for row in _rows(conn, "passages", {"ids": ids, "groups": groups})}
    found = [shown[i] for i in ids if i in shown]
    return [_hit(row, first_rank + n, 0.0, Ranks(vector=None, keyword=None))
            for n, row in enumerate(found)]


def _hit(row: tuple, rank: int, score: float, ranks: Ranks) -> SearchHit:
    """A row of the `passages` query as a hit."""
    (chunk_id, document_id, source_uri, path, title, heading, page, ocr, chunk_index, content,
     learned) = row
    return SearchHit(rank=rank, chunk_id=chunk_id, document_id=document_id,
                     source_uri=source_uri, path=path, title=title, heading=heading, page=page,
                     ocr=ocr, chunk_index=chunk_index, content=content, score=score,
                     ranks=ranks, learned_fact=learned)


# The statements of a search, planned once on each connection: each picks its path from the
# caller's scope itself (sql/queries/search.sql), and planning the statement anew took 2-3 ms
# of each search (at 100k chunks, side by side, hybrid p50 26.4 -> 24.1 ms for the caller who
# may read everything, 43.8 -> 41.6 for a tenth, 16.7 -> 14.3 for a hundredth, the same
# passages for every question). No path of them wants a sequential scan, and a plan that
# cannot see the groups costs the graph walk as if they were selective: at 10k chunks it
# sorted every view instead (bench/search.py, vector leg p50 23.3 ms, 9.4 through the graph).
_ONE_PLAN = "SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off"
# What configure_search_session set, back for the statements after a search.
_SESSION_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL enable_seqscan = on"
# Threads that run a search's vector leg beside its keyword leg: each waits on its backend.
_LEGS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="vector-leg")


def _rows(conn: psycopg.Connection, name: str, params: dict) -> list[tuple]:
    return conn.execute(query(name), params, prepare=True).fetchall()


def _beside(conn: psycopg.Connection, name: str, params: dict) -> list[tuple]:
    """A leg in a transaction of its own on `conn`, under the search's plans."""
    with conn.transaction():
        conn.execute(_ONE_PLAN)
        return _rows(conn, name, params)


class Searcher:
    """Question in, ranked passages out: planning, query embedding, the hybrid query and the
    optional reranker.

    Questions are embedded with the model the index was built with, which is not always the
    configured one: while a generation with a new model is built beside the live one, readers
    keep using the live model, and switch when the new generation is published.
    """

    def __init__(
        self, embedder: EmbedderSettings, synonyms: Synonyms, reranker: Reranker | None = None
    ) -> None:
        configured = make_embedder(embedder)
        self.synonyms = synonyms
        self.reranker = reranker if reranker is not None and reranker.name != "none" else None
        self.configured = configured.name  # what an index with no model recorded yet gets
        self.model: str | None = None  # the index's model as last seen
        self._settings = embedder  # the providers' hosts and keys, for another index's model
        self._embedders = {configured.name: configured}
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def embedder_for(self, model: str) -> Embedder:
        """The embedder of `model`, made once (UnknownEmbedderError if none can be)."""
        with self._lock:
            if model not in self._embedders:
                self._embedders[model] = embedder_for_index(model, self._settings)
            return self._embedders[model]

    def _query_vector(self, model: str, text: str) -> np.ndarray:
        """The question's embedding, kept for the latest QUERY_VECTORS questions: a question
        is searched in several modes and asked (kb eval), or asked again (the page), and
        embedding it is most of the CPU a search costs. The arrays are never written to."""
        key = (model, text)
        with self._lock:
            vector = self._vectors.get(key)
            if vector is not None:
                self._vectors.move_to_end(key)
                return vector
        vector = self.embedder_for(model).embed_query(text)
        with self._lock:
            self._vectors[key] = vector
            while len(self._vectors) > QUERY_VECTORS:
                self._vectors.popitem(last=False)
        return vector

    def follow(self, conn: psycopg.Connection) -> str:
        """Embed the questions prepared from now on with the model of the index on `conn`;
        return that model."""
        model = self.model = recorded_model(conn) or self.configured
        return model

    def prepare(self, question: str, mode: Mode = "hybrid") -> PreparedQuery:
        """Plan the question and embed it with the index's model as last seen (the vector is
        reused across modes by `kb eval`); before `follow` or a search has seen the index,
        `search` embeds it."""
        return self._prepare(question, mode, self.model)

    def _prepare(self, question: str, mode: Mode, model: str | None) -> PreparedQuery:
        started = time.perf_counter()
        plan = plan_question(question, self.synonyms)
        if mode in ("keyword", "graph") or model is None:
            return PreparedQuery(plan, None, None, (time.perf_counter() - started) * 1000)
        vector = self._query_vector(model, plan.embed_text)
        return PreparedQuery(plan, vector, model, (time.perf_counter() - started) * 1000)

    def search(
        self,
        conn: psycopg.Connection,
        prepared: PreparedQuery,
        groups: list[str],
        k: int = 10,
        mode: Mode = "hybrid",
        beside: psycopg.Connection | None = None,
    ) -> tuple[SearchResult, list[Evidence]]:
        """The top `k` passages `groups` may see; `beside`, a second connection to the same
        server, runs the vector leg while `conn` runs the keyword leg."""
        started = time.perf_counter()
        spent_ms = prepared.took_ms  # an embedding redone below counts from `started`
        fetch = max(k, RERANK_CANDIDATES) if self.reranker else k
        # One transaction: the index's model is read under the lock on index_settings that
        # a publication must take, so the views cannot switch to another model's vectors
        # between this check and the search.
        with conn.transaction():
            model = self.follow(conn)
            if mode in ("hybrid", "vector") and prepared.model != model:
                prepared = self._prepare(prepared.plan.question, mode, model)
            result, evidence = hybrid_search(
                conn, prepared.plan, prepared.vector, groups, fetch, mode, fusion_for(model),
                beside=beside)
        if self.reranker:
            result, evidence = self._rerank(result, evidence, k)
        took = (time.perf_counter() - started) * 1000 + spent_ms
        result.took_ms = round(took, 1)
        return result, evidence

    def _rerank(
        self, result: SearchResult, evidence: list[Evidence], k: int
    ) -> tuple[SearchResult, list[Evidence]]:
        candidates = [Candidate(h.chunk_id, h.content) for h in result.hits]
        order, _ = rerank_or_fallback(self.reranker, result.query, candidates, k, log)
        position = {hit.chunk_id: i for i, hit in enumerate(result.hits)}
        picked = [position[chunk_id] for chunk_id in order]
        hits = [msgspec.structs.replace(result.hits[i], rank=n)
                for n, i in enumerate(picked, start=1)]
        result = SearchResult(query=result.query, took_ms=result.took_ms, hits=hits)
        return result, [evidence[i] for i in picked]


@dataclass(frozen=True)
class PreparedQuery:
    plan: QueryPlan
    vector: np.ndarray | None
    model: str | None  # whose vector it is
    took_ms: float
