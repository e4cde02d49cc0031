"""What the HTTP handlers and `kb ask` call: search and ask for a verified caller, with the
query log, feedback and the answer cache. Synchronous: retrieval embeds the question and the
extractive answerer scores sentences, CPU work the HTTP layer runs in worker threads."""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict

import msgspec
import psycopg
from psycopg_pool import ConnectionPool

from kb_core.callers import Caller
from kb_core.keywords import normalize
from kb_core.queries import query
from kb_core.read_routing import ReadRouter
from kb_search.answerers.numbering import NumberedStream
from kb_search.asking import Asker, AskResult, PreparedAnswer
from kb_search.search import Mode, PreparedQuery, SearchResult

__all__ = ["AnswerCache", "KnowledgeService", "public"]

log = logging.getLogger(__name__)


class AnswerCache:
    """Answers by (question, groups, answerer), valid while the index version is unchanged."""

    def __init__(self, size: int = 1000) -> None:
        self.size = size
        self._entries: OrderedDict[tuple, tuple[int, AskResult]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(question: str, groups: tuple[str, ...], answerer: str) -> tuple:
        return normalize(question).strip(), tuple(sorted(set(groups))), answerer

    def get(self, key: tuple, version: int) -> AskResult | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != version:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: tuple, version: int, result: AskResult) -> None:
        with self._lock:
            self._entries[key] = (version, result)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


def public(result: AskResult | SearchResult) -> AskResult | SearchResult:
    """The result with documents named by their path, never the server's file path."""
    if isinstance(result, SearchResult):
        hits = [msgspec.structs.replace(h, source_uri=h.path) for h in result.hits]
        return msgspec.structs.replace(result, hits=hits)
    citations = [msgspec.structs.replace(c, source_uri=c.path) for c in result.citations]
    return msgspec.structs.replace(result, citations=citations)


class KnowledgeService:
    """Retrieval runs where `reads` sends it (a replica that has reached the fence, or the
    primary); the query log, feedback and everything about identity use `pool`, the primary."""

    def __init__(self, pool: ConnectionPool, asker: Asker, cache: AnswerCache | None = None,
                 reads: ReadRouter | None = None):
        self.pool = pool
        self.asker = asker
        self.cache = cache or AnswerCache()
        self.reads = reads or ReadRouter(pool)

    def search(self, caller: Caller, question: str, k: int, mode: Mode) -> SearchResult:
        searcher = self.asker.searcher
        prepared = searcher.prepare(question, mode)  # embedding holds no connection
        result, _ = self.reads.run_paired(lambda conn, beside: searcher.search(
            conn, prepared, list(caller.groups), k, mode, beside))
        return result

    def ask(self, caller: Caller, question: str) -> AskResult:
        """An answer (from the cache when the index has not changed), logged."""
        query_id = str(uuid.uuid4())
        key = AnswerCache.key(question, caller.groups, self.asker.answerer.name)
        cached = self.cache.get(key, self.reads.run(_index_version))
        if cached is not None:
            result = msgspec.structs.replace(cached, query_id=query_id)
            with self.pool.connection() as conn:
                self._log(conn, caller, question, result, hits=None, cached=True)
            return result
        question_vector = self.asker.searcher.prepare(question)  # holds no connection
        version, prepared = self.reads.run_paired(
            lambda conn, beside: self._retrieve(conn, beside, question, caller, question_vector))
        # The answerer (an LLM call of seconds) holds no connection: the pool serves searches.
        result = self.asker.answer(prepared, query_id)
        with self.pool.connection() as conn:
            self._log(conn, caller, question, result, hits=prepared.search, cached=False)
        self.cache.put(key, version, result)
        return result

    def _retrieve(self, conn: psycopg.Connection, beside: psycopg.Connection | None,
                  question: str, caller: Caller,
                  question_vector: PreparedQuery) -> tuple[int, PreparedAnswer]:
        """The index version and the passages, read in one transaction on one server. The
        version is read first, so the passages are never older than the version that tags
        their answer in the cache (a newer version would serve them after a revocation)."""
        with conn.transaction():
            version = _index_version(conn)
            return version, self.asker.retrieve(conn, question, list(caller.groups),
                                                question_vector, beside)

    def prepare_stream(self, caller: Caller, question: str) -> tuple[str, PreparedAnswer]:
        question_vector = self.asker.searcher.prepare(question)
        prepared = self.reads.run_paired(lambda conn, beside: self.asker.retrieve(
            conn, question, list(caller.groups), question_vector, beside))
        return str(uuid.uuid4()), prepared

    def stream(self, prepared: PreparedAnswer) -> NumberedStream:
        return self.asker.stream(prepared)

    def finish_stream(self, caller: Caller, question: str, query_id: str,
                      prepared: PreparedAnswer, stream: NumberedStream) -> AskResult:
        """The final answer of a stream iterated to the end, verified and logged."""
        result = self.asker.finish(prepared, stream.result(), query_id)
        with self.pool.connection() as conn:
            self._log(conn, caller, question, result, hits=prepared.search, cached=False)
        return result

    def _log(self, conn: psycopg.Connection, caller: Caller, question: str, result: AskResult,
             hits: SearchResult | None, cached: bool) -> None:
        # A cached answer retrieved nothing this time: its log entry records what it cites.
        retrieved = ([{"chunk_id": h.chunk_id, "path": h.path, "score": h.score}
                      for h in hits.hits] if hits
                     else [{"chunk_id": c.chunk_id, "path": c.path} for c in result.citations])
        conn.execute(query("log_query"), {
            "id": result.query_id, "caller_kind": caller.kind, "caller_subject": caller.subject,
            "groups": list(caller.groups), "question": question, "answer": result.answer,
            "found": result.found, "verified": result.verified, "answerer": result.answerer,
            "hits": msgspec.json.encode(retrieved).decode(), "latency_ms": result.took_ms,
            "cached": cached,
        })

    def feedback(self, caller: Caller, query_id: str, helpful: bool,
                 comment: str | None) -> bool:
        """Attach feedback to a query this caller asked; False when there is no such query."""
        with self.pool.connection() as conn:
            row = conn.execute(query("add_feedback"), {
                "query_id": query_id, "helpful": helpful, "comment": comment,
                "caller_kind": caller.kind, "caller_subject": caller.subject,
            }).fetchone()
        return row is not None

    def purge_log(self, days: int) -> int:
        with self.pool.connection() as conn:
            return conn.execute(query("purge_query_log"), {"days": days}).rowcount

    def recent_questions(self, caller: Caller, limit: int = 10) -> list[str]:
        """The caller's own latest distinct questions, newest first (the query log's, so
        they go with its retention)."""
        with self.pool.connection() as conn:
            rows = conn.execute(query("recent_questions"), {
                "caller_kind": caller.kind, "caller_subject": caller.subject,
                "limit": limit}).fetchall()
        return [question for (question,) in rows]


def _index_version(conn: psycopg.Connection) -> int:
    return conn.execute(query("index_version")).fetchone()[0]
