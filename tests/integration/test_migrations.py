"""Upgrading an installation: an index written by an older schema keeps answering."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from kb_core.database import connect
from kb_core.migrations import SQL_DIR, migrate
from kb_search.planner import plan_question
from kb_search.search import configure_search_session, hybrid_search


def _migrate_until(url: str, last: str) -> None:
    """Apply the migrations up to and including `last`, as an older release did."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_migrations ("
                     " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
        for path in sorted(SQL_DIR.glob("[0-9][0-9][0-9]_*.sql")):
            if path.name > last:
                break
            with conn.transaction():
                conn.execute(path.read_bytes())
                conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (path.name,))


def test_chunk_vectors_upgrade_keeps_every_generation_s_vectors_searchable(empty_database_url):
    _migrate_until(empty_database_url, "006_inline_keywords.sql")
    vector = np.eye(1, 384, dtype=np.float32)[0]
    with connect(empty_database_url, autocommit=True) as conn:
        # A second generation being built beside the live one is upgraded too.
        conn.execute("INSERT INTO index_generations (id, state) VALUES (2, 'building')")
        conn.execute("CREATE SCHEMA kb_gen_2")
        for table in ("documents", "chunks"):
            conn.execute(f"CREATE TABLE kb_gen_2.{table} (LIKE kb_gen_1.{table} INCLUDING ALL)")
        for schema in ("kb_gen_1", "kb_gen_2"):
            document_id = conn.execute(
                f"INSERT INTO {schema}.documents (source_uri, path, title, mime, size_bytes, "
                "checksum, pipeline_version, allowed_groups, access_rule, revision_source, "
                "file_mtime) VALUES ('/d', 'd', '規程', 'text/plain', 1, 'c', 'v', '{g}', 'r', "
                "'mtime', now()) RETURNING id").fetchone()[0]
            conn.execute(
                f"INSERT INTO {schema}.chunks (document_id, chunk_index, heading, content, "
                "search_text, token_count, text_sha256, allowed_groups, embedding, keywords) "
                "VALUES (%s, 0, '', '有給休暇', '有給休暇', 4, 's', '{g}', %s, "
                "'''有給'' ''休暇'''::tsvector)", (document_id, vector))

    assert "007_chunk_vectors.sql" in migrate(empty_database_url)

    with connect(empty_database_url, autocommit=True) as conn:
        for schema in ("kb_gen_1", "kb_gen_2"):
            assert conn.execute(
                f"SELECT count(*) FROM {schema}.chunk_vectors v JOIN {schema}.chunks c "
                "ON c.id = v.chunk_id AND v.allowed_groups = c.allowed_groups "
                "WHERE v.view_index = 0").fetchone()[0] == 1
            assert conn.execute(
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = 'chunks' AND column_name = 'embedding'", (schema,)
            ).fetchone()[0] == 0
        configure_search_session(conn)
        result, evidence = hybrid_search(conn, plan_question("有給休暇"), vector, ["g"], 5,
                                         "vector")
        assert [hit.content for hit in result.hits] == ["有給休暇"]
        assert evidence[0].similarity == pytest.approx(1.0)
        result, _ = hybrid_search(conn, plan_question("有給休暇"), vector, ["h"], 5, "vector")
        assert result.hits == []


def _gin_indexes(conn: psycopg.Connection, schema: str) -> set[str]:
    return {name for (name,) in conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'chunks' "
        "AND indexdef LIKE '%%USING gin%%'", (schema,))}


def test_the_keywords_and_groups_index_replaces_the_other_two_where_indexes_are_built(
        empty_database_url):
    _migrate_until(empty_database_url, "013_hnsw_build.sql")
    with connect(empty_database_url, autocommit=True) as conn:
        # A generation being rebuilt has no search index until its rows are in; it gets the
        # live generation's then.
        conn.execute("INSERT INTO index_generations (id, state) VALUES (2, 'building')")
        conn.execute("CREATE SCHEMA kb_gen_2")
        conn.execute("CREATE TABLE kb_gen_2.chunks (LIKE kb_gen_1.chunks INCLUDING ALL)")
        for name in _gin_indexes(conn, "kb_gen_2"):
            conn.execute(f"DROP INDEX kb_gen_2.{name}")
        assert _gin_indexes(conn, "kb_gen_1") == {"chunks_keywords_gin",
                                                  "chunks_allowed_groups_gin"}

    assert {"014_keywords_groups_gin.sql", "015_drop_keywords_gin.sql"} <= set(
        migrate(empty_database_url))

    with connect(empty_database_url, autocommit=True) as conn:
        assert _gin_indexes(conn, "kb_gen_1") == {"chunks_keywords_groups_gin"}
        assert _gin_indexes(conn, "kb_gen_2") == set()
