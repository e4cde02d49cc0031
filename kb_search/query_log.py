"""The query log: every answer given (question, caller, what it retrieved and cited), the
feedback its asker gives, the asker's own recent questions, and the retention purge. Always on
the primary: a replica cannot be written."""

from __future__ import annotations

import uuid
from typing import NamedTuple

import msgspec
from psycopg_pool import ConnectionPool

from kb_core.callers import Caller
from kb_core.queries import query
from kb_core.query_log_retention import purge_query_log
from kb_search.grounded_answers import AskResult
from kb_search.search import SearchResult

__all__ = ["LoggedTurn", "QueryLog", "UnknownQueryError"]


_UNKNOWN = ("follows names no answer this caller received (or one the query log has purged): "
            "ask the question on its own")


class UnknownQueryError(LookupError):
    """An answer the caller did not receive: never given, purged, or another caller's."""


class LoggedTurn(NamedTuple):
    """An earlier turn of a conversation as the log keeps it."""

    question: str
    asked_as: str
    answer: str
    cited_chunks: list[int]


class QueryLog:
    """What was asked and answered, and what the askers said of it."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def record(self, caller: Caller, question: str, mode: str, result: AskResult,
               hits: SearchResult | None, cached: bool, follows: str | None = None) -> None:
        """Log an answer given to `caller`, with the passages retrieved for it (`hits`; None
        for a cached answer, which retrieved nothing this time and records what it cites) and
        the answer it follows in a conversation."""
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
                "follows": follows,
                "asked_as": result.asked_as if result.asked_as != question else None,
                "cited_chunks": [c.chunk_id for c in result.citations if not c.learned_fact],
            })
            conn.execute(query("log_citations"), {"id": result.query_id, "uris": cited})

    def feedback(self, caller: Caller, query_id: str, helpful: bool,
                 comment: str | None) -> bool:
        """Attach feedback to a query this caller asked; False when there is no such query."""
        with self._pool.connection() as conn:
            row = conn.execute(query("add_feedback"), {
                "query_id": query_id, "helpful": helpful, "comment": comment,
                "caller_kind": caller.kind, "caller_subject": caller.subject,
            }).fetchone()
        return row is not None

    def conversation(self, caller: Caller, follows: str, turns: int) -> list[LoggedTurn]:
        """The turns of the caller's conversation that the answer `follows` ends, the latest
        first, at most `turns`; UnknownQueryError when the caller received no such answer
        (never given, purged, or another caller's: one and the same)."""
        try:
            follows = str(uuid.UUID(follows))
        except ValueError:
            raise UnknownQueryError(_UNKNOWN) from None
        with self._pool.connection() as conn:
            rows = conn.execute(query("conversation"), {
                "id": follows, "caller_kind": caller.kind, "caller_subject": caller.subject,
                "turns": turns}).fetchall()
        if not rows:
            raise UnknownQueryError(_UNKNOWN)
        return [LoggedTurn(question, asked_as, answer, list(cited))
                for question, asked_as, answer, cited in rows]

    def recent_questions(self, caller: Caller, limit: int = 10) -> list[str]:
        """The caller's own latest distinct questions, newest first (the query log's, so
        they go with its retention)."""
        with self._pool.connection() as conn:
            rows = conn.execute(query("recent_questions"), {
                "caller_kind": caller.kind, "caller_subject": caller.subject,
                "limit": limit}).fetchall()
        return [question for (question,) in rows]

    def purge(self, days: int) -> int:
        """Drop the entries older than `days` (questions can hold personal data); how many."""
        with self._pool.connection() as conn:
            return purge_query_log(conn, days)
