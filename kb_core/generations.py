"""Index generations: the live index and the rebuilt ones waiting beside it.

Each generation's index tables live in a schema `kb_gen_<id>`; the same names in `public` are
views onto the live generation. Readers and the document-by-document writers use the plain
names and so always reach the live generation; a rebuild writes into its own schema by putting
it first on the search path (`use_generation`). Publishing replaces the views in one
transaction, so every statement sees one generation whole, never a mix.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import sql

from kb_core.database import connect
from kb_core.queries import query

__all__ = [
    "BUILD_MEMORY_CAP_MB",
    "GENERATION_TABLES",
    "Access",
    "Generation",
    "GenerationError",
    "adopt_version",
    "build_search_indexes",
    "claimed",
    "create_generation",
    "discard_generation",
    "discard_generation_at",
    "generation",
    "is_claimed",
    "list_generations",
    "list_generations_at",
    "live_awaits_rebuild",
    "live_generation",
    "mark_round_launched",
    "missing_from",
    "on_generation",
    "publish_generation",
    "rebuild_needed",
    "record_evaluation",
    "refused_generation",
    "schema_of",
    "set_state",
    "use_generation",
]

log = logging.getLogger(__name__)

# The groups and rule a document's access file grants it now, by source_uri.
Access = Callable[[str], tuple[list[str], str | None]]
# The tables one generation owns; everything else (catalogue, embedding cache, failures, query
# log, tokens) is shared by all generations.
GENERATION_TABLES = ("documents", "chunks", "chunk_vectors", "keyword_df", "keyword_df_by_group",
                     "group_sets", "index_settings", "staged_documents", "learned_facts",
                     "mentions", "relations", "data_tables", "table_rows")
# Publishing waits at most this long for each lock, then lets go and tries again: readers that
# queued behind it wait no longer than that, and never long enough (deadlock_timeout, 1 s) to
# be chosen as the victim of a deadlock with it.
_LOCK_TIMEOUT = "100ms"
_PUBLISH_PATIENCE_S = 300.0
# What pg_get_indexdef says of an index: its head, name, table (schema-qualified) and the rest.
_INDEX_DEFINITION = re.compile(
    r"^(CREATE (?:UNIQUE )?INDEX) (\S+) ON (?:ONLY )?(?:\S+)\.(\S+) (USING .*)$")
# An HNSW graph is built several times faster while it fits in maintenance_work_mem: a view
# takes ~2.4 KB there (its 384 floats and 48 neighbours). The build never asks for more than
# this, whatever the index's size: a server short of memory builds slower, never runs out.
_GRAPH_BYTES_PER_VIEW = 2560
BUILD_MEMORY_CAP_MB = 4096


class GenerationError(RuntimeError):
    """A generation operation that cannot be done in the generation's present state."""


@dataclass(frozen=True)
class Generation:
    id: int
    pipeline_version: str | None
    state: str  # building, evaluating, passed, failed, live, retired, discarded
    created_at: dt.datetime
    build_rounds: int
    evaluated_at: dt.datetime | None
    published_at: dt.datetime | None
    evaluation: dict | None
    note: str | None

    @property
    def schema(self) -> str:
        return schema_of(self.id)

    def as_json(self) -> dict[str, object]:
        return {
            "id": self.id, "state": self.state, "pipeline_version": self.pipeline_version,
            "created_at": self.created_at.isoformat(timespec="seconds"),
            "published_at": self.published_at and self.published_at.isoformat(timespec="seconds"),
            "evaluation": self.evaluation, "note": self.note,
        }


def schema_of(generation_id: int) -> str:
    return f"kb_gen_{int(generation_id)}"


def list_generations(conn: psycopg.Connection) -> list[Generation]:
    return [Generation(*row) for row in conn.execute(query("generations"))]


def generation(conn: psycopg.Connection, generation_id: int) -> Generation:
    for gen in list_generations(conn):
        if gen.id == generation_id:
            return gen
    raise GenerationError(f"there is no index generation {generation_id}")


def live_generation(conn: psycopg.Connection) -> Generation:
    return next(gen for gen in list_generations(conn) if gen.state == "live")


def use_generation(conn: psycopg.Connection, generation_id: int | None) -> None:
    """Point this connection's index tables at generation `generation_id` (None: the live one,
    through the views). A generation whose tables are gone is refused: PostgreSQL skips a
    missing schema on the search path, and the names would reach the live index instead."""
    if generation_id is None:
        conn.execute("RESET search_path")
        return
    row = conn.execute(query("generation_state_of"), {"id": generation_id}).fetchone()
    if row is None or row[0] in ("retired", "discarded"):
        raise GenerationError(f"index generation {generation_id} "
                              f"{'does not exist' if row is None else 'is ' + row[0]}")
    conn.execute(sql.SQL("SET search_path = {}, public").format(
        sql.Identifier(schema_of(generation_id))))


def adopt_version(conn: psycopg.Connection, version: str) -> None:
    """Record `version` as the live generation's when it has none yet or holds no documents:
    the first index is built document by document, with nothing to gate it against."""
    conn.execute(query("adopt_pipeline_version"), {"version": version})


def live_awaits_rebuild(conn: psycopg.Connection, version: str) -> bool:
    """Whether the live generation was built by another pipeline version than `version`. Only
    a rebuild brings the new version to it; until then only changed bytes make one of its
    documents stale."""
    adopt_version(conn, version)
    return live_generation(conn).pipeline_version != version


def rebuild_needed(conn: psycopg.Connection, version: str) -> bool:
    """Whether the pipeline changed since the live generation was built and no generation for
    `version` exists yet (a failed or discarded one is not retried by itself)."""
    if not live_awaits_rebuild(conn, version):
        return False
    return conn.execute(query("generation_of_version"), {"version": version}).fetchone() is None


def refused_generation(conn: psycopg.Connection, version: str) -> Generation | None:
    """The generation built for `version` that its evaluation refused (or someone discarded),
    if that is where `version` stands."""
    for gen in reversed(list_generations(conn)):
        if gen.pipeline_version == version and gen.state != "retired":
            return gen if gen.state in ("failed", "discarded") else None
    return None


def create_generation(conn: psycopg.Connection, version: str) -> Generation:
    """A new, empty generation shaped like the live one, in state `building`."""
    with conn.transaction():
        conn.execute(query("generation_lock"))
        live = live_generation(conn)
        new_id = conn.execute(query("insert_generation"), {"version": version}).fetchone()[0]
        new, old = sql.Identifier(schema_of(new_id)), sql.Identifier(live.schema)
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(new))
        for table in GENERATION_TABLES:
            # Indexes, constraints and defaults come along (ids from the sequences all
            # generations share); foreign keys and triggers do not (the index-version trigger
            # is added when it goes live).
            conn.execute(sql.SQL("CREATE TABLE {}.{} (LIKE {}.{} INCLUDING ALL)").format(
                new, sql.Identifier(table), old, sql.Identifier(table)))
        conn.execute(sql.SQL(
            "ALTER TABLE {new}.chunks ADD FOREIGN KEY (document_id) "
            "REFERENCES {new}.documents (id) ON DELETE CASCADE; "
            "ALTER TABLE {new}.chunk_vectors ADD FOREIGN KEY (chunk_id) "
            "REFERENCES {new}.chunks (id) ON DELETE CASCADE; "
            "ALTER TABLE {new}.mentions ADD FOREIGN KEY (chunk_id) "
            "REFERENCES {new}.chunks (id) ON DELETE CASCADE; "
            "ALTER TABLE {new}.relations ADD FOREIGN KEY (chunk_id) "
            "REFERENCES {new}.chunks (id) ON DELETE CASCADE; "
            "ALTER TABLE {new}.data_tables ADD FOREIGN KEY (chunk_id) "
            "REFERENCES {new}.chunks (id) ON DELETE CASCADE; "
            "ALTER TABLE {new}.table_rows ADD FOREIGN KEY (chunk_id) "
            "REFERENCES {new}.chunks (id) ON DELETE CASCADE; "
            "ALTER TABLE {new}.table_rows ADD FOREIGN KEY (document_id, table_no) "
            "REFERENCES {new}.data_tables (document_id, table_no) ON DELETE CASCADE"
            ).format(new=new))
        # Its learned facts follow its documents' groups (sql/010_corrections.sql).
        conn.execute(sql.SQL(
            "CREATE TRIGGER documents_learned_facts AFTER INSERT OR UPDATE OR DELETE "
            "ON {}.documents FOR EACH STATEMENT "
            "EXECUTE FUNCTION public.learned_facts_follow_documents()").format(new))
        # Its keyword statistics follow its chunks (sql/024_statistics_per_group_set.sql).
        conn.execute("SELECT count_passage_terms_of(%s)", (schema_of(new_id),))
        # Its search indexes (the HNSW graph, the GIN indexes of keywords and groups) are
        # built once over all its rows before its evaluation (build_search_indexes): kept
        # up to date row by row while every document is written, they cost most of a build.
        for name, _ in _search_indexes(conn, schema_of(new_id)):
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(new, sql.Identifier(name)))
    log.info("created index generation %d for %s", new_id, version)
    return generation(conn, new_id)


def build_search_indexes(conn: psycopg.Connection, generation_id: int) -> dict[str, float]:
    """Build the search indexes the live generation has and generation `generation_id` lacks
    (all of them once its build rounds are done; none when they are built already), then
    vacuum and analyze its tables for the planner; return the seconds each took. The rows are
    all there: one build over them costs a fraction of keeping the indexes row by row."""
    schema = schema_of(generation_id)
    have = {_shape(definition) for _, definition in _search_indexes(conn, schema)}
    wanted = [definition for _, definition in _search_indexes(conn, live_generation(conn).schema)
              if _shape(definition) not in have]
    seconds: dict[str, float] = {}
    if wanted:  # counting a large generation's views takes seconds: only for a build
        conn.execute("SELECT set_config('maintenance_work_mem', %s, false)",
                     (f"{_build_memory_mb(conn, schema)}MB",))
    try:
        for definition in wanted:
            head, name, table, rest = _INDEX_DEFINITION.match(definition).groups()
            started = time.monotonic()
            conn.execute(f"{head} {name} ON {sql.Identifier(schema).as_string(conn)}.{table} "
                         f"{rest}")
            seconds[name] = round(time.monotonic() - started, 1)
            log.info("generation %d: index %s built in %.1f s", generation_id, name,
                     seconds[name])
    finally:
        conn.execute("RESET maintenance_work_mem")
    started = time.monotonic()
    conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.SQL(", ").join(
        sql.Identifier(schema, table) for table in GENERATION_TABLES)))
    seconds["vacuum_analyze"] = round(time.monotonic() - started, 1)
    return seconds


def _search_indexes(conn: psycopg.Connection, schema: str) -> list[tuple[str, str]]:
    """(name, definition) of the indexes of a generation's chunks and embedding views that no
    constraint needs: what searches read, and no writer."""
    return conn.execute(query("search_indexes"), {"schema": schema}).fetchall()


def _shape(definition: str) -> tuple[str, str, str]:
    """An index definition without its name and schema: the same index in any generation."""
    head, _, table, rest = _INDEX_DEFINITION.match(definition).groups()
    return head, table, rest


def _build_memory_mb(conn: psycopg.Connection, schema: str) -> int:
    """maintenance_work_mem for building the graph of the embedding views in `schema`: what it
    needs, within the cap, and never less than the server's own setting."""
    views = conn.execute(sql.SQL("SELECT count(*) FROM {}.chunk_vectors").format(
        sql.Identifier(schema))).fetchone()[0]
    server_mb = conn.execute(
        "SELECT pg_size_bytes(current_setting('maintenance_work_mem')) / 2^20").fetchone()[0]
    needed_mb = views * _GRAPH_BYTES_PER_VIEW // 2**20 + 64
    return int(max(server_mb, min(needed_mb, BUILD_MEMORY_CAP_MB)))


def mark_round_launched(conn: psycopg.Connection, generation_id: int) -> None:
    conn.execute(query("generation_round_launched"), {"id": generation_id})


def is_claimed(conn: psycopg.Connection, generation_id: int) -> bool:
    """Whether another session (`kb generation rebuild`) is driving this generation."""
    return not conn.execute(query("generation_try_claim"), {"id": generation_id}).fetchone()[0]


@contextmanager
def claimed(conn: psycopg.Connection, generation_id: int) -> Iterator[None]:
    """Drive a generation's rebuild from this session: the sensor leaves it alone meanwhile."""
    conn.execute(query("generation_claim"), {"id": generation_id})
    try:
        yield
    finally:
        conn.execute(query("generation_release"), {"id": generation_id})


def set_state(conn: psycopg.Connection, generation_id: int, state: str,
              note: str | None = None) -> None:
    conn.execute(query("generation_state"), {"id": generation_id, "state": state, "note": note})


def record_evaluation(conn: psycopg.Connection, generation_id: int, passed: bool,
                      evaluation: dict, note: str | None) -> None:
    conn.execute(query("generation_evaluated"), {
        "id": generation_id, "state": "passed" if passed else "failed",
        "evaluation": json.dumps(evaluation), "note": note})


@contextmanager
def on_generation(conn: psycopg.Connection, generation_id: int) -> Iterator[None]:
    """Generation `generation_id` first on the search path for a while, then the live one."""
    use_generation(conn, generation_id)
    try:
        yield
    finally:
        use_generation(conn, None)


def missing_from(conn: psycopg.Connection, generation_id: int) -> list[str]:
    """Paths of documents the live generation serves and generation `generation_id` lacks."""
    with on_generation(conn, generation_id):
        return [row[0] for row in conn.execute(query("generation_coverage"))]


def publish_generation(conn: psycopg.Connection, generation_id: int, version: str,
                       access: Access) -> int:
    """Make a generation that passed its evaluation for pipeline `version` the live one, in
    one transaction; drop the generation it replaces and return that one's id. `access` gives
    the current rule of documents the live generation does not hold (the others take the live
    documents' groups, which the sensor keeps current)."""
    deadline = time.monotonic() + _PUBLISH_PATIENCE_S
    while True:
        try:
            retired = _switch(conn, generation_id, version, access)
            break
        except psycopg.errors.LockNotAvailable:
            if time.monotonic() > deadline:
                raise GenerationError(
                    f"generation {generation_id} was not published: readers kept the index "
                    f"busy for {_PUBLISH_PATIENCE_S:.0f} s") from None
            time.sleep(0.2)
    # Readers still inside a statement on the old tables hold their locks: DROP waits for them.
    conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema_of(retired))))
    log.info("published index generation %d (generation %d retired)", generation_id, retired)
    return retired


def _switch(conn: psycopg.Connection, generation_id: int, version: str, access: Access) -> int:
    schema = sql.Identifier(schema_of(generation_id))
    with conn.transaction():
        conn.execute(query("generation_lock"))
        gen = generation(conn, generation_id)
        if gen.state != "passed" or gen.pipeline_version != version:
            raise GenerationError(
                f"generation {generation_id} is {gen.state}, built for {gen.pipeline_version}: "
                f"only a generation that passed its evaluation for the running pipeline "
                f"({version}) is published")
        conn.execute(query("lock_keyword_stats"))  # no document write is half done
        # Only the readers' locks are waited for briefly (see _LOCK_TIMEOUT).
        conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(_LOCK_TIMEOUT)))
        # Locking the views locks the live tables behind them: no reader is inside them now.
        conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.SQL(", ").join(
            sql.Identifier("public", table) for table in GENERATION_TABLES)))
        conn.execute(sql.SQL("SET LOCAL search_path = {}, public").format(schema))
        forgotten = [row[0] for row in conn.execute(query("generation_forgotten"))]
        if forgotten:
            conn.execute(query("delete_documents"), {"uris": forgotten})
        conn.execute(query("generation_copy_access"))
        for uri, indexed_groups, indexed_rule in conn.execute(
                query("candidate_only_documents")).fetchall():
            groups, rule = access(uri)
            # Rewriting a document's rows with the groups they hold would cost as much as
            # changing them (a new version of each row, the graph's entries included), and a
            # first build's live index holds no document: this is every one of them.
            if (sorted(groups), rule) != (sorted(indexed_groups), indexed_rule):
                conn.execute(query("regroup_document"),
                             {"uri": uri, "groups": groups, "rule": rule})
        for table in GENERATION_TABLES:
            conn.execute(sql.SQL("CREATE OR REPLACE VIEW {} AS SELECT * FROM {}").format(
                sql.Identifier("public", table), sql.Identifier(schema_of(generation_id), table)))
        conn.execute(sql.SQL(
            "CREATE TRIGGER documents_change_index_version "
            "AFTER INSERT OR UPDATE OR DELETE ON {}.documents "
            "FOR EACH STATEMENT EXECUTE FUNCTION public.bump_index_version()").format(schema))
        retired = conn.execute(query("retire_live_generation")).fetchone()[0]
        conn.execute(query("make_generation_live"), {"id": generation_id})
        # Corrections rejected or retired since the rebuild's facts were embedded are not
        # served by it; those whose documents it holds with other bytes go back for review.
        conn.execute(query("drop_unapproved_facts"))
        conn.execute(query("retire_stale_corrections"))
        conn.execute(query("bump_index_version"))
    return retired


def discard_generation(conn: psycopg.Connection, generation_id: int, note: str) -> None:
    """Empty a generation that is not live; its figures stay in index_generations. Its tables
    are emptied, not dropped: a run still working for it then writes into nothing that is
    served, where with no schema its table names would reach the live index."""
    with conn.transaction():
        conn.execute(query("generation_lock"))
        gen = generation(conn, generation_id)
        if gen.state in ("live", "retired", "discarded"):
            raise GenerationError(f"generation {generation_id} is {gen.state}: nothing to discard")
        if is_claimed(conn, generation_id):
            raise GenerationError(f"generation {generation_id} is being rebuilt by "
                                  "`kb generation rebuild` in another process")
        conn.execute(sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(
            sql.Identifier(gen.schema, table) for table in GENERATION_TABLES)))
        set_state(conn, generation_id, "discarded", note)
    log.info("discarded index generation %d", generation_id)


# For a door (`kb generation`), which holds no connection of its own: each opens one for its call.

def list_generations_at(database_url: str) -> list[Generation]:
    """list_generations on a connection of its own."""
    with connect(database_url) as conn:
        return list_generations(conn)


def discard_generation_at(database_url: str, generation_id: int, note: str) -> None:
    """discard_generation on a connection of its own."""
    with connect(database_url, autocommit=True) as conn:
        discard_generation(conn, generation_id, note)
