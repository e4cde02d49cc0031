"""Employees' corrections of answers and their review.

A correction names passages of the answer it corrects; it is kept by the (source_uri, checksum)
of their documents, and served to nobody until a reviewer approves it. Approval makes it a
learned fact of the live generation (kb_core/learned_facts.py) and bumps the index version,
so no cached answer outlives the decision; rejecting an approved one does the same. A
reviewer on the page sees and decides only corrections whose every document it may read; the
shell's `kb corrections` sees them all.
"""

from __future__ import annotations

import datetime as dt

import msgspec
import psycopg
from psycopg_pool import ConnectionPool

from kb_core.callers import Caller, reviewer_groups
from kb_core.learned_facts import EmbedderFor, fact_row, generation_embedder
from kb_core.queries import query

__all__ = [
    "MAX_PASSAGES",
    "CorrectedPassage",
    "CorrectionError",
    "CorrectionForReview",
    "Corrections",
    "UnknownCorrectionError",
    "approve_correction",
    "corrections_to_review",
    "reject_correction",
    "submit_correction",
]

MAX_PASSAGES = 10  # passages one correction may name: an answer cites at most five


class CorrectionError(ValueError):
    """A correction that cannot be submitted or decided as asked; the message says why."""


class UnknownCorrectionError(CorrectionError):
    """No such correction, or none this reviewer may read: the two look the same."""


class CorrectedPassage(msgspec.Struct):
    path: str
    heading: str
    passage: str  # as it was cited
    changed: bool  # its document is indexed now with other bytes
    gone: bool  # its document has left the index


class CorrectionForReview(msgspec.Struct):
    id: int
    status: str  # pending, or retired (approved, then a corrected document changed)
    correction: str
    question: str
    answer: str
    submitter_name: str
    submitted_at: dt.datetime
    reviewed_by: str | None
    reviewed_at: dt.datetime | None
    retired_at: dt.datetime | None
    note: str | None
    passages: list[CorrectedPassage]


def submit_correction(conn: psycopg.Connection, caller: Caller, name: str, query_id: str,
                      correction: str, chunk_ids: list[int]) -> int:
    """Record `caller`'s correction of the answer to its own query `query_id`, naming passages
    that answer was given and that the caller may still read; returns its id."""
    wanted = list(dict.fromkeys(chunk_ids))
    if not wanted or len(wanted) > MAX_PASSAGES:
        raise CorrectionError(f"name between 1 and {MAX_PASSAGES} passages of the answer")
    with conn.transaction():
        logged = conn.execute(query("logged_answer"), {
            "query_id": query_id, "caller_kind": caller.kind,
            "caller_subject": caller.subject}).fetchone()
        if logged is None:
            raise CorrectionError("no such query for this caller")
        question, answer, hits = logged
        if not set(wanted) <= {hit["chunk_id"] for hit in hits}:
            raise CorrectionError("a passage named is not one the answer was given")
        readable = {row[0]: row for row in conn.execute(query("readable_passages"), {
            "chunk_ids": wanted, "groups": list(caller.groups)})}
        if set(readable) != set(wanted):
            # A learned fact is no passage of a document, and a document may have changed or
            # been re-permissioned since the answer.
            raise CorrectionError("a passage named is no longer one of a document you may read")
        correction_id = conn.execute(query("insert_correction"), {
            "correction": correction, "question": question, "answer": answer,
            "query_id": query_id, "kind": caller.kind, "subject": caller.subject,
            "name": name}).fetchone()[0]
        for position, chunk_id in enumerate(wanted):
            _, source_uri, checksum, path, heading, passage = readable[chunk_id]
            conn.execute(query("insert_correction_source"), {
                "correction_id": correction_id, "position": position, "source_uri": source_uri,
                "checksum": checksum, "path": path, "heading": heading, "passage": passage})
    return correction_id


def corrections_to_review(conn: psycopg.Connection,
                          groups: list[str] | None = None) -> list[CorrectionForReview]:
    """Corrections awaiting a decision, oldest first; with `groups`, only those whose every
    document one of the groups may read."""
    rows = conn.execute(query("corrections_to_review"), {"groups": groups}).fetchall()
    passages: dict[int, list[CorrectedPassage]] = {row[0]: [] for row in rows}
    for correction_id, *passage in conn.execute(query("correction_sources_of"),
                                                {"ids": list(passages)}):
        passages[correction_id].append(CorrectedPassage(*passage))
    return [CorrectionForReview(*row, passages=passages[row[0]]) for row in rows]


def approve_correction(conn: psycopg.Connection, correction_id: int, reviewer: str,
                       embedder_for: EmbedderFor, groups: list[str] | None = None) -> None:
    """Make a pending (or retired) correction a learned fact of the live generation, holding
    for its documents as they are indexed now."""
    with conn.transaction():
        _, question, correction = _locked(conn, correction_id, groups, ("pending", "retired"))
        if conn.execute(query("correction_documents_missing"),
                        {"id": correction_id}).fetchone()[0]:
            raise CorrectionError(f"a document correction {correction_id} corrects has left "
                                  "the index: reject it instead")
        # The model is read in this transaction, which a publication must wait for: the vector
        # below is always of the model the live generation searches with.
        embedder = generation_embedder(conn, embedder_for)
        if embedder is None:
            raise CorrectionError("the index holds no documents")
        conn.execute(query("rekey_correction_sources"), {"id": correction_id})
        conn.execute(query("decide_correction"), {"id": correction_id, "status": "approved",
                                                  "reviewer": reviewer, "note": None})
        conn.execute(query("drop_unapproved_facts"))
        conn.execute(query("insert_learned_fact"),
                     fact_row(embedder, correction_id, question, correction))
        conn.execute(query("refresh_learned_fact_groups"))
        conn.execute(query("bump_index_version"))


def reject_correction(conn: psycopg.Connection, correction_id: int, reviewer: str,
                      groups: list[str] | None = None, note: str | None = None) -> None:
    """Refuse a correction; an approved one stops being served at once."""
    with conn.transaction():
        status, _, _ = _locked(conn, correction_id, groups, ("pending", "retired", "approved"))
        conn.execute(query("decide_correction"), {"id": correction_id, "status": "rejected",
                                                  "reviewer": reviewer, "note": note})
        conn.execute(query("drop_unapproved_facts"))
        if status == "approved":
            conn.execute(query("bump_index_version"))


def _locked(conn: psycopg.Connection, correction_id: int, groups: list[str] | None,
            allowed: tuple[str, ...]) -> tuple[str, str, str]:
    """The status, question and correction text of a correction this reviewer may decide,
    locked until the transaction ends."""
    conn.execute(query("decisions_wait_for_publication"))
    row = conn.execute(query("lock_correction"), {"id": correction_id}).fetchone()
    readable = row is not None and (groups is None or conn.execute(
        query("correction_readable_by"), {"id": correction_id, "groups": groups}).fetchone()[0])
    if not readable:
        raise UnknownCorrectionError(f"no correction {correction_id}")
    if row[0] not in allowed:
        raise CorrectionError(f"correction {correction_id} is {row[0]}")
    return row


class Corrections:
    """Employees' corrections of the answers they received, and their review."""

    def __init__(self, pool: ConnectionPool, embedder_for: EmbedderFor) -> None:
        self._pool = pool
        self._embedder_for = embedder_for

    def submit(self, caller: Caller, name: str, query_id: str, correction: str,
               chunk_ids: list[int]) -> int:
        """Record the caller's correction (signed `name`) of an answer it received, naming
        passages of that answer it may still read; its id. CorrectionError when refused."""
        with self._pool.connection() as conn:
            return submit_correction(conn, caller, name, query_id, correction, chunk_ids)

    def to_review(self, reviewer: Caller | None) -> list[CorrectionForReview]:
        """Corrections awaiting a decision, oldest first: those of documents the reviewer may
        read, or every one for the operator at the shell (`reviewer` None)."""
        with self._pool.connection() as conn:
            return corrections_to_review(conn, reviewer_groups(reviewer))

    def approve(self, reviewer: Caller | None, name: str, correction_id: int) -> None:
        """Make a correction a learned fact, served at once to the groups of every document it
        corrects. UnknownCorrectionError when the reviewer may not see it."""
        with self._pool.connection() as conn:
            approve_correction(conn, correction_id, name, self._embedder_for,
                               reviewer_groups(reviewer))

    def reject(self, reviewer: Caller | None, name: str, correction_id: int,
               note: str | None = None) -> None:
        """Refuse a correction; an approved one stops being served at once."""
        with self._pool.connection() as conn:
            reject_correction(conn, correction_id, name, reviewer_groups(reviewer), note)
