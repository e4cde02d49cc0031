"""The engine's one face: a knowledge base opened once from the configuration, which every door
(the query service, the `kb` command, the Dagster evaluation, kb_eval and bench/) uses and
nothing else of the engine. It owns the database preparation, the connection pools, the search
session and read routing; it shows no pool, connection or searcher.

Synchronous: retrieval embeds the question and the extractive answerer scores sentences, CPU
work the HTTP door runs in worker threads. Retrieval runs where the read router sends it (a
replica that has reached the fence, or the primary); the query log, feedback and corrections
use the primary."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Generator, Iterator
from typing import Literal

import msgspec
import psycopg
from psycopg_pool import ConnectionPool

from kb_core.callers import Caller
from kb_core.entities import Entity, entities_of
from kb_core.generations import use_generation
from kb_core.index_fence import follow_index_changes
from kb_core.learned_facts import EmbedderFor
from kb_core.migrations import prepare_database
from kb_core.queries import query
from kb_core.read_routing import ReadRouter, Replica, ReplicaStatus, replica_name
from kb_core.settings import DeepSettings, Settings
from kb_search import corrections, sources
from kb_search.answer_cache import AnswerCache
from kb_search.answerers import Passage, make_answerer
from kb_search.answerers.numbering import AnswerDelta, NumberedStream, renumber
from kb_search.answerers.prompt import document_block
from kb_search.asking import Asker, AskResult, PreparedAnswer
from kb_search.corrections import CorrectionForReview
from kb_search.deep import (
    answer_parts,
    combine,
    confirmed,
    part_citations,
    passages_per_part,
)
from kb_search.entity_cards import (
    EntityCard,
    EntityMatch,
    entities_in,
    entity_card,
    find_entities,
)
from kb_search.gap_report import GapReport, gap_report
from kb_search.question_parts import QuestionPart, QuestionSplit, refers_back, split_question
from kb_search.rerankers import make_reranker
from kb_search.search import (
    Mode,
    ReadByOcr,
    Searcher,
    SearchHit,
    SearchResult,
    pooled_search_connection,
)
from kb_search.sources import DocumentView, Original
from kb_search.synonyms import Synonyms

__all__ = [
    "ASK_MODES",
    "AnswerEvent",
    "AskMode",
    "Assessment",
    "KnowledgeBase",
    "OfferedPassage",
    "OfferedPassages",
    "Stage",
    "StagePart",
    "open_knowledge_base",
    "public",
    "quoted_passage",
]

log = logging.getLogger(__name__)

# The longest a request waits for a pooled connection while the database is up (then it fails:
# 503 over HTTP).
POOL_TIMEOUT_S = 5.0
# A pool retries a failed connection with exponential backoff (1, 2, 4, 8, 16, 32 s ...) and
# starts no other attempt meanwhile, so after a 20 s database restart the service stayed
# unready for another 10 s and more. Giving up after 1 s lets the next request that needs a
# connection start a fresh attempt at once.
RECONNECT_TIMEOUT_S = 1.0


class OfferedPassage(msgspec.Struct):
    """A passage the answerer is given, before it answers: what a citation may come to be."""

    passage: int  # the number a delta's `cited` and the answer's citations refer to it by
    path: str
    title: str
    heading: str
    page: str | None
    ocr: ReadByOcr
    chunk_id: int
    # Where the page's citation card opens the source (GET /v1/documents/{id}); null for a
    # learned fact, which has no document of its own.
    document_id: int | None
    learned_fact: bool


class OfferedPassages(msgspec.Struct):
    """The first event of an answer as it is written: the passages offered, under their own
    numbers. Not the answer's [n]: those come with the deltas that first use them."""

    passages: list[OfferedPassage]


# How a question is answered: `flash` whole, as one passage may answer it; `deep` part by
# part when it asks several things (kb_search/question_parts.py); `auto` part by part too,
# unless one passage turns out to answer every part.
AskMode = Literal["auto", "flash", "deep"]
ASK_MODES: tuple[AskMode, ...] = ("auto", "flash", "deep")


class StagePart(msgspec.Struct):
    """A part of the plan: the sub-question, and what the answer calls it."""

    question: str
    label: str


class Stage(msgspec.Struct, omit_defaults=True):
    """Where an answer's work stands before its text: `plan` (its parts; none for a question
    answered whole), `part` (a part's retrieval: whether evidence was found, how many
    passages), `answer` (writing it)."""

    stage: Literal["plan", "part", "answer"]
    parts: list[StagePart] | None = None
    index: int | None = None
    found: bool | None = None
    hits: int | None = None


# `ask_events` yields the stages of the work, the passages offered, then the answer's text
# piece by piece, then the answer itself (verified, logged), which is authoritative.
AnswerEvent = Stage | OfferedPassages | AnswerDelta | AskResult


class Assessment(msgspec.Struct):
    """A question put to the engine for measuring it: what was retrieved, the evidence the
    answerability decision read, and (when asked for) the answer. Neither cached nor logged."""

    search: SearchResult  # the passages offered to the answerer
    features: list[float]  # kb_search/answerability.py FEATURES, for the caller's groups
    answerability: float  # the model's probability that the passages hold the answer
    refused_by_rule: bool  # "not found" whatever the model says (no passage, a missing code)
    answer: AskResult | None


class KnowledgeBase:
    """Search, answers and what goes with them, for a verified caller whose groups filter
    every passage inside SQL. Open one with `open_knowledge_base`; close it when done."""

    def __init__(self, pool: ConnectionPool, reads: ReadRouter, asker: Asker,
                 replica_pools: list[ConnectionPool], database_url: str,
                 deep: DeepSettings) -> None:
        self._pool = pool
        self._deep = deep
        self._reads = reads
        self._asker = asker
        self._replica_pools = replica_pools
        self._database_url = database_url
        self._cache = AnswerCache()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for pool in (*self._replica_pools, self._pool):
            pool.close()

    # --- questions ----------------------------------------------------------------------------

    def search(self, caller: Caller, question: str, k: int = 10,
               mode: Mode = "hybrid") -> SearchResult:
        """The top `k` passages the caller may see."""
        searcher = self._asker.searcher
        prepared = searcher.prepare(question, mode)  # embedding holds no connection
        result, _ = self._reads.run_paired(lambda conn, beside: searcher.search(
            conn, prepared, list(caller.groups), k, mode, beside))
        return result

    def ask(self, caller: Caller, question: str, *, mode: AskMode = "auto",
            use_cache: bool = True) -> AskResult:
        """An answer, logged; with `use_cache`, from the answer cache while the index has not
        changed since it was given."""
        key = AnswerCache.key(question, caller.groups, self._asker.answerer.name, mode)
        if use_cache and (cached := self._cache.get(key, self._reads.run(_index_version))):
            result = msgspec.structs.replace(cached, query_id=str(uuid.uuid4()))
            self._log(caller, question, mode, result, None, cached=True)
            return result
        versions: list[int] = []
        *_, result = self._answer(caller, question, mode, versions, streamed=False)
        assert isinstance(result, AskResult)
        # The oldest index version a part was read at: a change after it retires the answer.
        self._cache.put(key, min(versions), result)
        return result

    def ask_events(self, caller: Caller, question: str, *, mode: AskMode = "auto",
                   use_cache: Literal[False] = False) -> Iterator[AnswerEvent]:
        """The answer as it is worked out and written: its stages, the passages offered, the
        text's deltas (each with the citation numbers it uses first), then the answer,
        verified and logged once the iterator is exhausted. Always answered afresh
        (`use_cache` can only be False): a cached answer has no stages or deltas to show.
        Closing the iterator early stops the work (a part not yet searched is not)."""
        del use_cache  # stated at the call, so no door assumes a cached stream
        return self._answer(caller, question, mode, [], streamed=True)

    def assess(self, caller: Caller, question: str, *, mode: AskMode = "auto",
               answer: bool = True) -> Assessment:
        """What the engine retrieves and decides for `question`, with the answer when asked:
        for evaluation and fitting, so neither cached nor logged. Retrieval and the decision
        are the whole question's; the answer is given in `mode`."""
        _, prepared = self._retrieve(caller, question)
        if not answer:
            given = None
        elif mode == "flash":
            given = self._asker.answer(prepared, "assessment")
        else:
            *_, given = self._answer(caller, question, mode, [], streamed=False, log=False)
            assert isinstance(given, AskResult)
        return Assessment(
            search=prepared.search, features=prepared.features,
            answerability=prepared.answerability, refused_by_rule=prepared.refused_by_rule,
            answer=given)

    def _answer(self, caller: Caller, question: str, mode: AskMode, versions: list[int], *,
                streamed: bool, log: bool = True) -> Iterator[AnswerEvent]:
        """The events of one answer (`ask_events`), the index version of each read appended
        to `versions`; unless `streamed`, an LLM writes the answer whole (no deltas)."""
        query_id = str(uuid.uuid4())
        split = self._split(question, mode)
        warnings = ([f"the question asks {split.over_limit} things, more than "
                     f"KB_DEEP_MAX_PARTS={self._deep.max_parts}: answered as one question"]
                    if split.over_limit else [])
        if split.multi:
            # A tentative split is searched before it is shown: its outcome decides it.
            if split.tentative:
                stages, retrieved = _collected(self._search_parts(caller, split, versions))
            else:
                yield _plan(split)
                stages, retrieved = [], (yield from self._search_parts(caller, split, versions))
            if not split.tentative or mode == "deep" or confirmed(retrieved):
                if stages:
                    yield _plan(split)
                    yield from stages
                yield Stage("answer")
                result = yield from self._parts_answer(question, split, retrieved, query_id,
                                                       streamed)
                self._link_entities(caller, result)
                if log:
                    self._log(caller, question, mode, result, _parts_hits(retrieved),
                              cached=False)
                yield result
                return
        yield Stage("plan", parts=[])
        version, prepared = self._retrieve(caller, question)
        versions.append(version)
        if split.multi:  # the parts searched first count in the answer's time
            prepared.started = min([prepared.started,
                                    *(p.started for p in retrieved if p is not None)])
        yield Stage("answer")
        if streamed:
            yield _offered(prepared)
            stream = self._asker.stream(prepared)
            yield from stream
            result = self._asker.finish(prepared, stream.result(), query_id)
        else:
            result = self._asker.answer(prepared, query_id)
        result.warnings.extend(warnings)
        self._link_entities(caller, result)
        if log:
            self._log(caller, question, mode, result, prepared.search, cached=False)
        yield result

    def _link_entities(self, caller: Caller, result: AskResult) -> None:
        if result.found:
            result.entities = self._reads.run(
                lambda conn: entities_in(conn, result.answer, list(caller.groups)))

    def _split(self, question: str, mode: AskMode) -> QuestionSplit:
        if mode == "flash":
            return QuestionSplit([QuestionPart(question, question)], "single")
        return split_question(question, self._deep.max_parts)

    def _search_parts(self, caller: Caller, split: QuestionSplit,
                      versions: list[int]
                      ) -> Generator[Stage, None, list[PreparedAnswer | None]]:
        """Each part's retrieval, a stage as each ends, until the time budget is spent;
        returns them by part (None for a part not reached in time)."""
        started = time.perf_counter()
        retrieved: list[PreparedAnswer | None] = []
        asked: list[Entity] = []  # what the parts before named
        for index, part in enumerate(split.parts):
            if time.perf_counter() - started > self._deep.timeout_s:
                retrieved.append(None)  # named in the answer as not reached in time
                continue
            # A part that opens on an earlier part's subject (その工場の〜) starts the graph
            # leg from what the earlier parts named: its answer is one reference away.
            carried = asked if refers_back(part.question) else []
            asked = [*asked, *entities_of(part.question)]
            version, prepared = self._retrieve(caller, part.question, carried)
            versions.append(version)
            retrieved.append(prepared)
            yield Stage("part", index=index, found=prepared.evidence_found,
                        hits=len(prepared.search.hits))
        return retrieved

    def _parts_answer(self, question: str, split: QuestionSplit,
                      retrieved: list[PreparedAnswer | None], query_id: str,
                      streamed: bool) -> Generator[AnswerEvent, None, AskResult]:
        """The deltas of an answer given part by part; returns the answer."""
        started = min((p.started for p in retrieved if p is not None), default=time.perf_counter())
        answerer = self._asker.answerer
        parts = combine(question, split, retrieved, started, passages_per_part(answerer))
        yield _offered(parts.prepared)
        stream = answer_parts(answerer, parts, streamed=streamed)
        yield from NumberedStream(stream, parts.prepared.offered)
        answer = stream.result()
        result = self._asker.finish(parts.prepared, answer, query_id)
        _, numbers = renumber(answer.text, parts.prepared.offered)
        return msgspec.structs.replace(result, parts=part_citations(parts, stream, numbers),
                                       comparison=stream.comparison)

    def _retrieve(self, caller: Caller, question: str,
                  carried: list[Entity] | None = None) -> tuple[int, PreparedAnswer]:
        """The index version and the passages, read in one transaction on one server; the
        graph leg starts from the entities `carried` too. The version is read first, so the
        passages are never older than the version that tags their answer in the cache (a
        newer version would serve them after a revocation)."""
        question_vector = self._asker.searcher.prepare(question)  # holds no connection
        if carried:
            named = {e.key for e in question_vector.plan.entities}
            extra = {e.key: e for e in carried if e.key not in named}
            plan = msgspec.structs.replace(question_vector.plan, entities=[
                *question_vector.plan.entities, *extra.values()])
            question_vector = dataclasses.replace(question_vector, plan=plan)

        def read(conn: psycopg.Connection,
                 beside: psycopg.Connection | None) -> tuple[int, PreparedAnswer]:
            with conn.transaction():
                return _index_version(conn), self._asker.retrieve(
                    conn, question, list(caller.groups), question_vector, beside)

        return self._reads.run_paired(read)

    def _log(self, caller: Caller, question: str, mode: AskMode, result: AskResult,
             hits: SearchResult | None, cached: bool) -> None:
        # A cached answer retrieved nothing this time: its log entry records what it cites.
        retrieved = ([{"chunk_id": h.chunk_id, "path": h.path, "score": h.score}
                      for h in hits.hits] if hits
                     else [{"chunk_id": c.chunk_id, "path": c.path} for c in result.citations])
        parts = ([{"question": p.question, "found": p.found, "searched": p.searched}
                  for p in result.parts] if result.parts else None)
        cited = [c.source_uri for c in result.citations if not c.learned_fact]
        with self._pool.connection() as conn:  # one transaction: the entry and its citations
            conn.execute(query("log_query"), {
                "id": result.query_id, "caller_kind": caller.kind,
                "caller_subject": caller.subject, "groups": list(caller.groups),
                "question": question, "answer": result.answer,
                "found": result.found, "verified": result.verified,
                "answerer": result.answerer, "hits": msgspec.json.encode(retrieved).decode(),
                "latency_ms": result.took_ms, "cached": cached, "mode": mode,
                "parts": None if parts is None else msgspec.json.encode(parts).decode(),
            })
            conn.execute(query("log_citations"), {"id": result.query_id, "uris": cited})

    def document_groups(self, source_uris: list[str]) -> dict[str, list[str]]:
        """The groups each document (or learned fact) grants, by source_uri: whom an answer
        citing it may reach. For evaluation, which checks every citation against the
        question's groups; a caller's own reads are filtered in SQL and need none of this."""
        def read(conn: psycopg.Connection) -> dict[str, list[str]]:
            rows = conn.execute(query("documents_groups"), {"uris": source_uris}).fetchall()
            return {uri: list(allowed) for uri, allowed in rows}

        return self._reads.run(read)

    def index_model(self) -> str:
        """The embedding model of the index searched: the one recorded, else the one an
        empty index gets."""
        return self._reads.run(self._asker.searcher.follow)

    # --- what employees do with answers -------------------------------------------------------

    def feedback(self, caller: Caller, query_id: str, helpful: bool,
                 comment: str | None) -> bool:
        """Attach feedback to a query this caller asked; False when there is no such query."""
        with self._pool.connection() as conn:
            row = conn.execute(query("add_feedback"), {
                "query_id": query_id, "helpful": helpful, "comment": comment,
                "caller_kind": caller.kind, "caller_subject": caller.subject,
            }).fetchone()
        return row is not None

    def recent_questions(self, caller: Caller, limit: int = 10) -> list[str]:
        """The caller's own latest distinct questions, newest first (the query log's, so
        they go with its retention)."""
        with self._pool.connection() as conn:
            rows = conn.execute(query("recent_questions"), {
                "caller_kind": caller.kind, "caller_subject": caller.subject,
                "limit": limit}).fetchall()
        return [question for (question,) in rows]

    def purge_query_log(self, days: int) -> int:
        """Drop the query log's entries older than `days` (questions can hold personal data)."""
        with self._pool.connection() as conn:
            return conn.execute(query("purge_query_log"), {"days": days}).rowcount

    def knowledge_gaps(self, reviewer: Caller | None, days: int = 30) -> GapReport:
        """What the last `days` days asked that no document answered or whose answer was
        marked unhelpful, by topic, and the documents going stale or unused: what the reviewer
        may see of them (every question and document for the operator, `reviewer` None)."""
        embedder = self._embedder_for(self.index_model())
        with self._pool.connection() as conn:
            return gap_report(conn, _groups(reviewer), days, embedder)

    # --- entities -----------------------------------------------------------------------------

    def find_entities(self, caller: Caller, name: str) -> list[EntityMatch]:
        """Entities the caller's passages name whose normalised name is `name`'s (first), or
        begins with it (docs/knowledge-graph.md)."""
        return self._reads.run(lambda conn: find_entities(conn, name, list(caller.groups)))

    def entity(self, caller: Caller, entity_id: str) -> EntityCard | None:
        """The card of an entity: where the caller's passages name it, by document, and what
        they name it with; None as for an entity that does not exist."""
        return self._reads.run(lambda conn: entity_card(conn, entity_id, list(caller.groups)))

    # --- cited sources ------------------------------------------------------------------------

    def document(self, caller: Caller, document_id: int,
                 chunk_id: int | None = None) -> DocumentView | None:
        """A document the caller may read and, with `chunk_id`, that passage and its
        neighbours; None as for a document that does not exist."""
        with self._pool.connection() as conn:
            return sources.document_view(conn, document_id, list(caller.groups), chunk_id)

    def original(self, caller: Caller, document_id: int) -> Original | None:
        """A copy of the original file of a document the caller may read, while it is the one
        indexed (ChangedOriginalError otherwise); None as for a document that does not exist.
        No connection is held while the file is read."""
        with self._pool.connection() as conn:
            indexed = sources.indexed_original(conn, document_id, list(caller.groups))
        return None if indexed is None else sources.verified_copy(indexed)

    # --- corrections and learned facts --------------------------------------------------------

    def submit_correction(self, caller: Caller, name: str, query_id: str, correction: str,
                          chunk_ids: list[int]) -> int:
        """Record the caller's correction (signed `name`) of an answer it received, naming
        passages of that answer it may still read; its id. CorrectionError when refused."""
        with self._pool.connection() as conn:
            return corrections.submit_correction(conn, caller, name, query_id, correction,
                                                 chunk_ids)

    def corrections_to_review(self, reviewer: Caller | None) -> list[CorrectionForReview]:
        """Corrections awaiting a decision, oldest first: those of documents the reviewer may
        read, or every one for the operator at the shell (`reviewer` None)."""
        with self._pool.connection() as conn:
            return corrections.corrections_to_review(conn, _groups(reviewer))

    def approve_correction(self, reviewer: Caller | None, name: str,
                           correction_id: int) -> None:
        """Make a correction a learned fact, served at once to the groups of every document it
        corrects. UnknownCorrectionError when the reviewer may not see it."""
        with self._pool.connection() as conn:
            corrections.approve_correction(conn, correction_id, name, self._embedder_for,
                                           _groups(reviewer))

    def reject_correction(self, reviewer: Caller | None, name: str, correction_id: int,
                          note: str | None = None) -> None:
        """Refuse a correction; an approved one stops being served at once."""
        with self._pool.connection() as conn:
            corrections.reject_correction(conn, correction_id, name, _groups(reviewer), note)

    @property
    def _embedder_for(self) -> EmbedderFor:
        return self._asker.searcher.embedder_for

    # --- readiness and read routing -----------------------------------------------------------

    @property
    def configured_model(self) -> str:
        """The embedding model an index with none recorded yet is searched with."""
        return self._asker.searcher.configured

    def query_embedder(self, index_model: str) -> str:
        """The embedder that embeds questions for an index of `index_model`, made once
        (UnknownEmbedderError when none can be)."""
        return self._asker.searcher.embedder_for(index_model).name

    def replica_status(self) -> list[ReplicaStatus]:
        """Each read replica's state: reachable, replay position against the fence."""
        return self._reads.status() if self._reads.replicas else []

    async def follow_index_changes(self) -> None:
        """Keep the read fence at every index change on the primary, until cancelled; while
        it does not run, only the primary answers. Nothing to follow without replicas."""
        if self._reads.replicas:
            await follow_index_changes(self._database_url, self._reads.fence)


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
    asker = Asker(searcher, make_answerer(settings.answerer) if answers else None,
                  settings.max_false_not_found)

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
    return KnowledgeBase(pool, ReadRouter(pool, replicas), asker,
                         [r.pool for r in replicas], settings.database_url, settings.deep)


def public(result: AskResult | SearchResult) -> AskResult | SearchResult:
    """The result with documents named by their path, never the server's file path: what
    leaves the installation (HTTP) shows."""
    if isinstance(result, SearchResult):
        hits = [msgspec.structs.replace(h, source_uri=h.path) for h in result.hits]
        return msgspec.structs.replace(result, hits=hits)
    citations = [msgspec.structs.replace(c, source_uri=c.path) for c in result.citations]
    return msgspec.structs.replace(result, citations=citations)


def quoted_passage(hit: SearchHit) -> str:
    """A passage as quoted document text, fenced as the LLM answerers fence it (escaped, in a
    <document> block numbered by its rank): whoever receives it (an assistant over MCP) is
    shown data, which a passage saying 「以前の指示を無視して…」 cannot break out of."""
    return document_block(Passage(n=hit.rank, chunk_id=hit.chunk_id, path=hit.path,
                                  title=hit.title, heading=hit.heading, page=hit.page,
                                  content=hit.content))


def _offered(prepared: PreparedAnswer) -> OfferedPassages:
    hits = {h.chunk_id: h for h in prepared.search.hits}
    return OfferedPassages(passages=[
        OfferedPassage(passage=p.n, path=p.path, title=p.title, heading=p.heading, page=p.page,
                       ocr=hits[p.chunk_id].ocr, chunk_id=p.chunk_id,
                       document_id=hits[p.chunk_id].document_id,
                       learned_fact=hits[p.chunk_id].learned_fact)
        for p in prepared.passages])


def _collected(events: Generator[Stage, None, list[PreparedAnswer | None]]
               ) -> tuple[list[Stage], list[PreparedAnswer | None]]:
    """What a generator yields, and what it returns."""
    yielded = []
    while True:
        try:
            yielded.append(next(events))
        except StopIteration as stop:
            return yielded, stop.value


def _plan(split: QuestionSplit) -> Stage:
    return Stage("plan", parts=[StagePart(p.question, p.label) for p in split.parts])


def _parts_hits(retrieved: list[PreparedAnswer | None]) -> SearchResult:
    """Every part's passages, for the query log."""
    hits = [h for p in retrieved if p is not None for h in p.search.hits]
    return SearchResult(query="", took_ms=0.0, hits=hits)


def _groups(caller: Caller | None) -> list[str] | None:
    return None if caller is None else list(caller.groups)


def _index_version(conn: psycopg.Connection) -> int:
    return conn.execute(query("index_version")).fetchone()[0]
