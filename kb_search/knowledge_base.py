"""The engine's root: a knowledge base opened once from the configuration, which every door
(the query service, the `kb` command, the Dagster evaluation, kb_eval and bench/) uses through
its services, one per concern, and nothing else of the engine. Opening it prepares the
database and builds the connection pools, read routing, searcher and answerer once; it shows
no pool, connection or searcher.

Retrieval runs where the read router sends it (a replica that has reached the fence, or the
primary); the query log, feedback, corrections and the operator's reads use the primary."""

from __future__ import annotations

import logging
from typing import TypeVar

import msgspec
import psycopg
from psycopg_pool import ConnectionPool

from kb_core.generations import use_generation
from kb_core.migrations import prepare_database
from kb_core.read_routing import ReadRouter, Replica, replica_name
from kb_core.settings import Settings
from kb_search.answer_flow import AnswerFlow
from kb_search.answerers import Passage, make_answerer
from kb_search.answerers.prompt import document_block
from kb_search.corrections import Corrections
from kb_search.entity_cards import Entities, EntityCard
from kb_search.gap_report import Gaps
from kb_search.grounded_answers import AskResult, GroundedAnswers
from kb_search.operations import Operations
from kb_search.passage_reference import PassageRef, named_by_path, reference
from kb_search.query_log import QueryLog
from kb_search.questions import Questions
from kb_search.rerankers import make_reranker
from kb_search.search import Searcher, SearchResult, pooled_search_connection
from kb_search.sources import Sources
from kb_search.synonyms import Synonyms

__all__ = ["KnowledgeBase", "open_knowledge_base", "public", "quoted_passage"]

log = logging.getLogger(__name__)
# What leaves the installation naming documents.
_Shown = TypeVar("_Shown", AskResult, SearchResult, EntityCard)

# The longest a request waits for a pooled connection while the database is up (then it fails:
# 503 over HTTP).
POOL_TIMEOUT_S = 5.0
# A pool retries a failed connection with exponential backoff (1, 2, 4, 8, 16, 32 s ...) and
# starts no other attempt meanwhile, so after a 20 s database restart the service stayed
# unready for another 10 s and more. Giving up after 1 s lets the next request that needs a
# connection start a fresh attempt at once.
RECONNECT_TIMEOUT_S = 1.0


class KnowledgeBase:
    """Search, answers and what goes with them, one service per concern, for verified callers
    whose groups filter every passage inside SQL. Open one with `open_knowledge_base`; close it
    when done."""

    def __init__(self, pools: list[ConnectionPool], *, questions: Questions,
                 query_log: QueryLog, sources: Sources, corrections: Corrections,
                 entities: Entities, gaps: Gaps, operations: Operations) -> None:
        self._pools = pools
        self.questions = questions  # search, answers, assessments
        self.query_log = query_log  # what was asked, feedback, recent questions, retention
        self.sources = sources  # the cited documents and their originals
        self.corrections = corrections  # employees' corrections and their review
        self.entities = entities  # entities and their cards
        self.gaps = gaps  # the knowledge-gap report
        self.operations = operations  # the index's state, readiness, replicas

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for pool in self._pools:
            pool.close()


def open_knowledge_base(settings: Settings, *, connections: int = 2,
                        generation: int | None = None, answers: bool = True,
                        outage_ok: bool = False) -> KnowledgeBase:
    """The knowledge base of `settings`: the database started (embedded by default) and
    migrated, pools of up to `connections` on the primary and on each read replica, and the
    engine configured (embedder, synonyms, reranker, answerer). `generation` points every
    search at a rebuilt index generation instead of the live one (its evaluation before
    publication), and then no replica serves. Without `answers` no answerer is built (a door
    that only searches needs no LLM's API key) and asking raises RuntimeError.

    A database that does not answer fails the opening, unless `outage_ok` (a service, which
    must come up and answer 503 until its database is back: the pools keep connecting in the
    background)."""
    try:
        settings = prepare_database(settings)
    except psycopg.OperationalError as exc:
        if not (outage_ok and settings.database_url):
            raise
        log.warning("the database does not answer (%s): requests fail until it does",
                    str(exc).strip())
    searcher = Searcher(settings.embedder, Synonyms(settings.synonyms),
                        make_reranker(settings.reranker))
    grounded = GroundedAnswers(searcher, make_answerer(settings.answerer) if answers else None,
                               settings.max_false_not_found)
    pool, replicas = _pools(settings, connections, generation)
    reads = ReadRouter(pool, replicas)
    query_log = QueryLog(pool)
    return KnowledgeBase(
        [*(r.pool for r in replicas), pool],
        questions=Questions(grounded, reads, AnswerFlow(grounded, reads, query_log, settings.deep),
                            query_log, settings.conversation.turns),
        query_log=query_log,
        sources=Sources(pool, reads),
        corrections=Corrections(pool, searcher.embedder_for),
        entities=Entities(reads),
        gaps=Gaps(pool, reads, searcher),
        operations=Operations(pool, reads, searcher, settings.database_url))


def _pools(settings: Settings, connections: int,
           generation: int | None) -> tuple[ConnectionPool, list[Replica]]:
    """The primary's pool and each read replica's, opening in the background."""
    def configure(conn: psycopg.Connection) -> None:
        if generation is not None:
            use_generation(conn, generation)
        pooled_search_connection(conn)

    # Two connections kept open: a search runs its two legs at once on two of them when both
    # are idle (kb_core/read_routing.py, run_paired).
    least = min(2, connections)
    pool = ConnectionPool(
        settings.database_url, min_size=least, max_size=connections, open=False,
        timeout=POOL_TIMEOUT_S, reconnect_timeout=RECONNECT_TIMEOUT_S, configure=configure,
        check=ConnectionPool.check_connection, name="search")
    # Searches may run on streaming replicas (autocommit: the router checks a replica's replay
    # position before the search's transaction begins, kb_core/read_routing.py).
    replicas = [] if generation is not None else [
        Replica(replica_name(url), ConnectionPool(
            url, min_size=least, max_size=connections, open=False, timeout=POOL_TIMEOUT_S,
            reconnect_timeout=RECONNECT_TIMEOUT_S, configure=pooled_search_connection,
            check=ConnectionPool.check_connection, kwargs={"autocommit": True},
            name=f"replica-{i}"))
        for i, url in enumerate(settings.database_read_urls)]
    pool.open(wait=False)
    for replica in replicas:
        replica.pool.open(wait=False)
    return pool, replicas


def public(result: _Shown) -> _Shown:
    """The result with its documents named by their path (`named_by_path`): what leaves the
    installation (HTTP, MCP) shows."""
    if isinstance(result, SearchResult):
        return msgspec.structs.replace(result, hits=[named_by_path(h) for h in result.hits])
    if isinstance(result, EntityCard):
        return msgspec.structs.replace(
            result, documents=[named_by_path(d) for d in result.documents])
    return msgspec.structs.replace(
        result, citations=[named_by_path(c) for c in result.citations])


def quoted_passage(n: int, ref: PassageRef, content: str) -> str:
    """`content` of the passage `ref` as quoted document text, fenced as the LLM answerers
    fence it (escaped, in a <document> block numbered `n`): whoever receives it (an assistant
    over MCP) is shown data, which a passage saying 「以前の指示を無視して…」 cannot break out
    of."""
    return document_block(Passage(n=n, content=content, **reference(ref)))
