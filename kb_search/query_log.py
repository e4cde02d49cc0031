"""The query log: every answer given (question, caller, what it retrieved and cited), the
feedback its asker gives, the asker's own recent questions, and the retention purge. Always on
the primary: a replica cannot be written."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple

import msgspec
from psycopg_pool import ConnectionPool

from kb_core.callers import Caller
from kb_core.queries import query
from kb_core.query_log_retention import purge_query_log
from kb_search.answerers.answer import Passage, citations, claims
from kb_search.grounded_answers import AskResult
from kb_search.passage_reference import PassageRef, reference
from kb_search.quoting import quote_passage
from kb_search.search import SearchResult

__all__ = [
    "REOPENED_TURNS",
    "LoggedTurn",
    "QueryLog",
    "RecentQuestion",
    "ReopenedCitation",
    "ReopenedTurn",
    "UnknownQueryError",
]

# The latest turns of a conversation a reopening shows: more than anyone scrolls back through,
# few enough that reading them stays one quick statement.
REOPENED_TURNS = 20


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


class RecentQuestion(msgspec.Struct):
    """A question the caller asked, with its latest answer: the conversation it reopens."""

    question: str
    query_id: str
    asked_at: datetime


class ReopenedCitation(PassageRef):
    """A passage an answer cited, as it reads now, numbered [n] as the answer cites it, with
    the sentences the answer took from it (quoted anew from the passage's text)."""

    n: int
    quote: str
    context_before: str
    context_after: str


class ReopenedTurn(msgspec.Struct):
    """A turn of a conversation reopened: the question, how it was searched, and the answer
    with its citations when every passage it cited is still readable by the caller."""

    query_id: str
    question: str
    asked_as: str  # the question as searched (the question itself when asked alone)
    asked_at: datetime
    found: bool
    verified: bool
    # False: a passage the answer cited is no longer one the caller may read (its groups
    # changed, or the passage left the index): the answer and its citations are withheld.
    answer_shown: bool
    answer: str | None = None
    citations: list[ReopenedCitation] = []


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
        rows = self._chain("conversation", caller, follows, {"turns": turns})
        return [LoggedTurn(question, asked_as, answer, list(cited))
                for question, asked_as, answer, cited in rows]

    def reopen(self, caller: Caller, query_id: str,
               turns: int = REOPENED_TURNS) -> list[ReopenedTurn]:
        """The caller's conversation that its answer `query_id` ends, the oldest turn first, at
        most `turns` of the latest; UnknownQueryError when the caller received no such answer
        (never given, purged, or another caller's: one and the same). A turn's answer is shown
        only when the caller's groups may read every passage it cited now."""
        rows = self._chain("reopen_conversation", caller, query_id,
                           {"turns": turns, "groups": list(caller.groups)})
        return [_reopened(*row) for row in rows]

    def _chain(self, name: str, caller: Caller, query_id: str, params: dict) -> list[tuple]:
        """The rows of the query `name` over the caller's chain of answers ending at
        `query_id`; UnknownQueryError when there are none."""
        try:
            query_id = str(uuid.UUID(query_id))
        except ValueError:
            raise UnknownQueryError(_UNKNOWN) from None
        with self._pool.connection() as conn:
            rows = conn.execute(query(name), {
                "id": query_id, "caller_kind": caller.kind, "caller_subject": caller.subject,
                **params}).fetchall()
        if not rows:
            raise UnknownQueryError(_UNKNOWN)
        return rows

    def recent(self, caller: Caller, limit: int = 10) -> list[RecentQuestion]:
        """The caller's own latest distinct questions, newest first, each with its latest
        answer's query_id."""
        with self._pool.connection() as conn:
            rows = conn.execute(query("recent_questions"), {
                "caller_kind": caller.kind, "caller_subject": caller.subject,
                "limit": limit}).fetchall()
        return [RecentQuestion(question, str(query_id), asked_at)
                for question, query_id, asked_at in rows]

    def purge(self, days: int) -> int:
        """Drop the entries older than `days` (questions can hold personal data); how many."""
        with self._pool.connection() as conn:
            return purge_query_log(conn, days)


def _reopened(query_id: uuid.UUID, question: str, asked_as: str, asked_at: datetime, found: bool,
              verified: bool, answer: str | None, passages: list[list] | None) -> ReopenedTurn:
    """A row of `reopen_conversation` as a turn. Its answer is withheld also when it cites a
    number no logged passage stands for (a learned fact, which the log does not name, so
    whether the caller may still read it cannot be told)."""
    turn = ReopenedTurn(str(query_id), question, asked_as, asked_at, found, verified,
                        answer_shown=False)
    if answer is None or passages is None or not set(citations(answer)) <= {
            p[0] for p in passages}:
        return turn
    said = claims(answer)
    return msgspec.structs.replace(turn, answer_shown=True, answer=answer, citations=[
        _cited(Passage(n=n, chunk_id=chunk_id, document_id=document_id, path=path, title=title,
                       heading=heading, page=page, ocr=ocr, content=content),
               [c.text for c in said if n in c.cites], asked_as)
        for n, chunk_id, document_id, path, title, heading, page, ocr, content in passages])


def _cited(passage: Passage, claims_citing: list[str], asked_as: str) -> ReopenedCitation:
    quote = quote_passage(passage, claims_citing, asked_as)
    return ReopenedCitation(n=passage.n, quote=quote.text, context_before=quote.before,
                            context_after=quote.after, **reference(passage))
