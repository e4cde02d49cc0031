"""The index's integrity statements: what each finds wrong, named row by row. The blocking
checks of search_index run them over the documents a run wrote; a rebuilt generation's gate runs
them over the whole generation before it may be evaluated (kb_pipeline/defs/)."""

import psycopg

from kb_core.queries import query

__all__ = ["INTEGRITY", "integrity_violations", "violations_markdown"]

# The blocking checks' statements, with what each row they return names.
_ROWS = {
    "chunks_with_bad_embeddings": "document, chunk",
    "documents_with_broken_chunks": "document, chunks, positions, last position, groups differ",
    "group_sizes_drift": "group, recorded, counted",
    "orphan_documents": "document",
    "broken_graph": "document, chunk, reference or entity",
}
# What a rebuilt generation is checked for whole, at its gate. Not orphans: its publication
# drops the documents whose files left the catalogue while it was built.
INTEGRITY = ("chunks_with_bad_embeddings", "documents_with_broken_chunks", "group_sizes_drift",
             "broken_graph")


def integrity_violations(conn: psycopg.Connection) -> dict[str, list[tuple]]:
    """What the INTEGRITY statements find in the whole index `conn` reads, by statement."""
    return {name: conn.execute(query(name), {"uris": None}).fetchall() for name in INTEGRITY}


def violations_markdown(name: str, rows: list[tuple]) -> str:
    """The rows statement `name` found, as a Markdown list for a check's metadata."""
    return "\n".join(f"- {_ROWS[name]}: {', '.join(map(str, row))}" for row in rows) or "none"
