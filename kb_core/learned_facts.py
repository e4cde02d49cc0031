"""Learned facts: approved corrections as each index generation holds them, searched by both
legs (their keyword terms and their vector under the generation's own model) beside the
documents' passages. Who may see one is kept on its row and follows the documents it corrects
in the same transaction as any change to them (`refresh_learned_fact_groups`, a trigger of
sql/010_corrections.sql)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import psycopg

from kb_core.embeddings import Embedder
from kb_core.index_model import recorded_model
from kb_core.keywords import to_tsvector_literal
from kb_core.queries import query

__all__ = [
    "EmbedderFor",
    "FactCounts",
    "corrections_changed_at",
    "fact_counts",
    "fact_row",
    "generation_embedder",
    "index_learned_facts",
]

# The embedder of an index's recorded model (Searcher.embedder_for, or embedder_for_index with
# the configured providers' hosts and keys).
EmbedderFor = Callable[[str], Embedder]
# What is embedded and searched for a fact: the question it answers, then the correction, as a
# chunk's text starts with its 【title】.
_HEAD = "【利用者による訂正】"


class FactCounts(msgspec.Struct):
    pending: int
    approved: int
    rejected: int
    retired: int
    facts: int  # learned facts the generation holds for approved corrections
    visible_to_nobody: int  # of those: a corrected document changed, or they share no group


def generation_embedder(conn: psycopg.Connection, embedder_for: EmbedderFor) -> Embedder | None:
    """The embedder of the generation on `conn`'s search path; None while it holds nothing."""
    model = recorded_model(conn)
    return None if model is None else embedder_for(model)


def fact_row(embedder: Embedder, correction_id: int, question: str,
             correction: str) -> dict[str, object]:
    """The parameters of `insert_learned_fact` for one correction."""
    text = f"{_HEAD}{question}\n{correction}"
    return {"correction_id": correction_id, "token_count": embedder.count_tokens(text),
            "keywords": to_tsvector_literal(text),
            "embedding": embedder.embed_documents([text])[0]}


def index_learned_facts(conn: psycopg.Connection, embedder_for: EmbedderFor) -> int:
    """Bring the learned facts of the generation on `conn`'s search path in line with the
    corrections: drop those no longer approved, embed and add the approved ones it lacks (a
    rebuilt generation, with its own model). Returns how many were added."""
    conn.execute(query("drop_unapproved_facts"))
    missing = conn.execute(query("learned_fact_texts")).fetchall()
    embedder = generation_embedder(conn, embedder_for)
    if not missing or embedder is None:
        return 0
    rows = [fact_row(embedder, *correction) for correction in missing]
    with conn.transaction():  # a fact is never there without its groups
        for row in rows:
            conn.execute(query("insert_learned_fact"), row)
        conn.execute(query("refresh_learned_fact_groups"))
    return len(rows)


def fact_counts(conn: psycopg.Connection) -> FactCounts:
    """Corrections by status and the learned facts of the generation on the search path."""
    return FactCounts(*conn.execute(query("correction_counts")).fetchone())


def corrections_changed_at(conn: psycopg.Connection) -> str | None:
    """When a correction was last submitted, decided or retired, as text; None before the
    first: what tells that the learned facts may be out of date."""
    return conn.execute(query("corrections_changed_at")).fetchone()[0]
