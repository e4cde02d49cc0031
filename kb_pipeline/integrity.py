"""The index's integrity statements: what each finds wrong, named row by row. The blocking
checks of search_index run them over the documents a run wrote; a rebuilt generation's gate runs
them over the whole generation before it may be evaluated (kb_pipeline/defs/). The graph's check
also reports the size of the graph it checked."""

import msgspec
import psycopg

from kb_core.queries import query

__all__ = ["INTEGRITY", "GraphSize", "graph_size", "integrity_violations", "table_size",
           "violations", "violations_markdown"]

# The blocking checks' statements, with what each row they return names.
_ROWS = {
    "chunks_with_bad_embeddings": "document, chunk",
    "documents_with_broken_chunks": "document, chunks, positions, last position, groups differ",
    "keyword_statistics_drift": "passages of, recorded, counted",
    "orphan_documents": "document",
    "broken_graph": "document, chunk, reference or entity",
    "broken_tables": "document, table, what is wrong",
}
# What a rebuilt generation is checked for whole, at its gate. Not orphans: its publication
# drops the documents whose files left the catalogue while it was built.
INTEGRITY = ("chunks_with_bad_embeddings", "documents_with_broken_chunks",
             "keyword_statistics_drift",
             "broken_graph", "broken_tables")


class GraphSize(msgspec.Struct):
    """The entity graph of some documents, counted."""

    entities: int
    mentions: int
    references: int


def violations(conn: psycopg.Connection, name: str, uris: list[str] | None = None) -> list[tuple]:
    """The rows statement `name` finds wrong in the documents `uris` (None: the whole index)."""
    return conn.execute(query(name), {"uris": uris}).fetchall()


def integrity_violations(conn: psycopg.Connection) -> dict[str, list[tuple]]:
    """What the INTEGRITY statements find in the whole index `conn` reads, by statement."""
    return {name: violations(conn, name) for name in INTEGRITY}


def graph_size(conn: psycopg.Connection, uris: list[str] | None = None) -> GraphSize:
    """The entities, mentions and references of the documents `uris` (None: the whole index)."""
    return GraphSize(*conn.execute(query("graph_counts"), {"uris": uris}).fetchone())


def table_size(conn: psycopg.Connection, uris: list[str] | None = None) -> tuple[int, int]:
    """The tables and table rows of the documents `uris` (None: the whole index)."""
    tables, rows = conn.execute(query("table_counts"), {"uris": uris}).fetchone()
    return tables, rows


def violations_markdown(name: str, rows: list[tuple]) -> str:
    """The rows statement `name` found, as a Markdown list for a check's metadata."""
    return "\n".join(f"- {_ROWS[name]}: {', '.join(map(str, row))}" for row in rows) or "none"
