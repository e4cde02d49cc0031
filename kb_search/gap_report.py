"""The knowledge-gap report: what employees asked that no document answered (whole, or a part
of a multi-part question) or whose answer they marked unhelpful, grouped by topic with the
documents retrieved closest to each topic; documents answers cite whose content has not changed
for over a year; documents no answer cites.

A reviewer sees a question only when every group of its asker is one of the reviewer's groups (a
question can tell what only its asker's groups know), and a document only when it may read it;
the operator at the shell (`groups` None) sees everything. Citation counts are over every
answer: they say how a document is used, and hold no question.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import unicodedata
from collections import Counter

import msgspec
import numpy as np
import psycopg
from psycopg_pool import ConnectionPool

from kb_core.callers import Caller, reviewer_groups
from kb_core.embeddings.embedder import Embedder
from kb_core.queries import query
from kb_core.read_routing import ReadRouter
from kb_search.gap_topics import group_questions, threshold_for
from kb_search.search import Searcher

__all__ = ["GapDocument", "GapQuestion", "GapReport", "GapTopic", "Gaps", "StaleDocument",
           "UncitedDocument", "gap_report"]

STALE_AFTER = dt.timedelta(days=365)  # content unchanged this long, and still cited: stale
CLOSEST = 3  # documents named per topic
RETRIEVED = 3  # an asking's first passages that count as retrieved for its topic


class GapQuestion(msgspec.Struct):
    question: str
    asked: int  # times in the window it went unanswered or was marked unhelpful


class GapDocument(msgspec.Struct):
    document_id: int
    path: str
    title: str
    retrieved: int  # askings of the topic that retrieved it among their first three passages
    chunk_id: int | None  # where to open it: the passage retrieved first, else its first one


class GapTopic(msgspec.Struct):
    asked: int  # askings in the window: not found (whole or a part) or marked unhelpful
    not_found: int
    unhelpful: int
    questions: list[GapQuestion]  # most asked first, then first asked first
    closest: list[GapDocument]  # the documents retrieved for it most often, readable ones only


class StaleDocument(msgspec.Struct):
    document_id: int
    path: str
    title: str
    cited: int  # answers in the window that cite it
    unchanged_since: dt.datetime  # when its content took its present form
    chunk_id: int | None  # its first passage, where to open it


class UncitedDocument(msgspec.Struct):
    document_id: int
    path: str
    title: str
    registered_at: dt.datetime  # in the catalogue since
    chunk_id: int | None  # its first passage, where to open it


class GapReport(msgspec.Struct):
    days: int
    since: dt.datetime  # the window's start
    citations_since: dt.datetime  # "never cited" counts from the later of this and `since`
    topics: list[GapTopic]  # most asked first
    stale: list[StaleDocument]  # most cited first
    never_cited: list[UncitedDocument]

    def counts(self) -> dict[str, int]:
        """The report in figures alone: what may be shown where question text may not."""
        return {"topics": len(self.topics),
                "not_found": sum(t.not_found for t in self.topics),
                "unhelpful": sum(t.unhelpful for t in self.topics),
                "stale_documents": len(self.stale),
                "never_cited_documents": len(self.never_cited)}


class _Asking(msgspec.Struct):
    question: str
    unhelpful: bool  # False: not found
    hits: list[tuple[str, int | None]]  # (path, chunk id) of its first passages retrieved


def gap_report(conn: psycopg.Connection, groups: list[str] | None, days: int,
               embedder: Embedder | None) -> GapReport:
    """The report over the last `days` days for a reviewer of `groups` (None: everything),
    its questions grouped by `embedder`'s vectors (by shared codes alone without one)."""
    now = conn.execute("SELECT now()").fetchone()[0]
    since = now - dt.timedelta(days=days)
    params = {"groups": groups, "since": since}
    askings = _askings(conn.execute(query("gap_questions"), params).fetchall())
    recorded = conn.execute(query("citations_since")).fetchone()[0]
    uncited_since = max(since, recorded)
    stale = [StaleDocument(*row) for row in conn.execute(
        query("stale_documents"), {**params, "unchanged_before": now - STALE_AFTER})]
    uncited = [UncitedDocument(*row) for row in conn.execute(
        query("uncited_documents"), {**params, "since": uncited_since})]
    return GapReport(days=days, since=since, citations_since=recorded,
                     topics=_topics(conn, askings, groups, embedder),
                     stale=stale, never_cited=uncited)


def _askings(rows: list[tuple]) -> list[_Asking]:
    """One asking per question not found, per part not found, and per answer marked unhelpful
    that was not already one of those."""
    askings = []
    for question, not_found, parts, unhelpful, logged in rows:
        hits = [(h["path"], h.get("chunk_id")) for h in logged[:RETRIEVED]]
        if not_found:
            askings.append(_Asking(question, False, hits))
        askings.extend(_Asking(part, False, hits) for part in parts)
        if unhelpful and not not_found and not parts:
            askings.append(_Asking(question, True, hits))
    return askings


def _topics(conn: psycopg.Connection, askings: list[_Asking], groups: list[str] | None,
            embedder: Embedder | None) -> list[GapTopic]:
    by_text: dict[str, list[_Asking]] = {}
    for asking in askings:  # the same question asked again is one question, asked more often
        by_text.setdefault(_same(asking.question), []).append(asking)
    # Most asked first, then in the order first asked (the log is read oldest first).
    texts = sorted(by_text, key=lambda t: -len(by_text[t]))
    if not texts:
        return []
    vectors = _vectors(conn, texts, embedder) if embedder else None
    threshold = threshold_for(embedder.name) if embedder else None
    grouped = group_questions(texts, vectors, threshold)
    paths = sorted({path for a in askings for path, _ in a.hits})
    readable = {path: (document_id, title, first) for path, document_id, title, first in
                conn.execute(query("readable_documents_at"), {"paths": paths, "groups": groups})}
    # A passage retrieved then is the one to open while its document still holds it.
    live = set(conn.execute(query("passages_at"), {
        "chunks": sorted({chunk for a in askings for _, chunk in a.hits})}).fetchall())
    topics = []
    for members in grouped:
        mine = [a for i in members for a in by_text[texts[i]]]
        retrieved = Counter(p for a in mine for p in dict.fromkeys(p for p, _ in a.hits)
                            if p in readable)
        opened: dict[str, int] = {}
        for path, chunk in (hit for a in mine for hit in a.hits):
            if (chunk, path) in live:
                opened.setdefault(path, chunk)
        unhelpful = sum(a.unhelpful for a in mine)
        topics.append(GapTopic(
            asked=len(mine), not_found=len(mine) - unhelpful, unhelpful=unhelpful,
            questions=[GapQuestion(by_text[texts[i]][0].question, len(by_text[texts[i]]))
                       for i in members],
            closest=[GapDocument(readable[p][0], p, readable[p][1], n,
                                 opened.get(p, readable[p][2]))
                     for p, n in sorted(retrieved.items(), key=lambda x: (-x[1], x[0]))
                     [:CLOSEST]]))
    return sorted(topics, key=lambda t: -t.asked)


def _vectors(conn: psycopg.Connection, texts: list[str], embedder: Embedder) -> np.ndarray:
    """The question vector of each of `texts`: those kept from an earlier report, the others
    embedded now and kept."""
    shas = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    kept = dict(conn.execute(query("question_vectors"),
                             {"model": embedder.name, "shas": shas}).fetchall())
    new = {sha: embedder.embed_query(t) for t, sha in zip(texts, shas, strict=True)
           if sha not in kept}
    if new:
        conn.execute(query("keep_question_vectors"), {
            "model": embedder.name, "shas": list(new), "embeddings": list(new.values())})
    return np.array([kept[sha] if sha in kept else new[sha] for sha in shas])


def _same(question: str) -> str:
    """What two askings of one question have in common: width, case and surrounding space."""
    return unicodedata.normalize("NFKC", question).strip().casefold()


class Gaps:
    """The knowledge-gap report, for a reviewer or the operator."""

    def __init__(self, pool: ConnectionPool, reads: ReadRouter, searcher: Searcher) -> None:
        self._pool = pool
        self._reads = reads
        self._searcher = searcher

    def report(self, reviewer: Caller | None, days: int = 30) -> GapReport:
        """What the last `days` days asked that no document answered or whose answer was
        marked unhelpful, by topic, and the documents going stale or unused: what the reviewer
        may see of them (every question and document for the operator, `reviewer` None)."""
        # Questions are grouped with the vectors of the index's own model.
        embedder = self._searcher.embedder_for(self._reads.run(self._searcher.follow))
        with self._pool.connection() as conn:
            return gap_report(conn, reviewer_groups(reviewer), days, embedder)
