"""What a gated rebuild decides without Dagster: the documents the next build round of a new
index generation has to ingest, and the access rules its publication gives every document. The
folder sensor's part in rebuilds and `kb generation rebuild` share the first; the publication
asset uses the second (kb_pipeline/defs/generations/)."""

import psycopg

from kb_core.generations import Access, Generation, on_generation
from kb_pipeline.access import AccessError
from kb_pipeline.catalogue import stale_documents
from kb_pipeline.stages import access_now

__all__ = ["MAX_BUILD_ROUNDS", "current_access", "stale_keys"]

# Rounds of rebuild runs before a generation is evaluated as it stands: files that keep
# changing, or keep failing without a checksum to recognise them by, must not keep it building.
MAX_BUILD_ROUNDS = 3


def stale_keys(conn: psycopg.Connection, gen: Generation, version: str, max_file_bytes: int,
               keys: list[str]) -> list[str]:
    """The documents partitions (of `keys`) the next build round of `gen` has to ingest (a
    file over `max_file_bytes` is not one): none once its rounds are used up."""
    if gen.build_rounds >= MAX_BUILD_ROUNDS:
        return []
    with on_generation(conn, gen.id):
        stale = stale_documents(conn, version, max_file_bytes)
    known = set(keys)
    return [uri for uri in stale if uri in known]


def current_access(conn: psycopg.Connection) -> Access:
    """A document's groups and rule as its access file states them now, for a publication
    (kb_core.generations.publish_generation); an unreadable rule grants nobody."""
    def access(uri: str) -> tuple[list[str], str | None]:
        try:
            found = access_now(conn, uri)
        except (OSError, AccessError):  # an unreadable rule hides the document, never widens
            return [], None
        return ([], None) if found is None else (list(found.groups), found.rule)

    return access
