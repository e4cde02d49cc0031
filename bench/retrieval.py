"""The vector leg's HNSW settings: recall against exact search, and latency, for several
ef_search values, with and without a selective group filter.

    .venv/bin/python bench/retrieval.py --chunks 100000

Builds a synthetic index in its own embedded PostgreSQL (a temporary KB_HOME): unit vectors
drawn around a few thousand centres, the way embeddings of real passages cluster by topic, so
the graph faces the same near-duplicate neighbourhoods. 2% of the chunks belong to a small
group, to measure filtered search with iterative scans. Figures are medians over the queries.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
import uuid
from pathlib import Path

import numpy as np


def build(conn, chunks: int, rng: np.random.Generator) -> np.ndarray:  # noqa: ANN001
    # Topics, passages about a subject within a topic, and passages: neighbourhoods nest the
    # way real passage embeddings do (e5 cosines crowd into 0.7-1.0), rather than uniform noise
    # in 384 dimensions, on which any graph index degenerates to an exhaustive scan.
    def around(centres: np.ndarray, count: int, spread: float) -> np.ndarray:
        picked = centres[rng.integers(0, len(centres), count)]
        noise = rng.normal(scale=spread / np.sqrt(384), size=(count, 384))
        points = (picked + noise).astype(np.float32)
        return points / np.linalg.norm(points, axis=1, keepdims=True)

    topics = around(rng.normal(size=(1, 384)).astype(np.float32), 200, 3.0)
    subjects = around(topics, max(chunks // 20, 10), 0.6)
    vectors = around(subjects, chunks, 0.35)
    conn.execute(
        "INSERT INTO documents (source_uri, path, title, mime, size_bytes, checksum, "
        "pipeline_version, allowed_groups, revision_source, file_mtime) VALUES "
        "('/bench', 'bench', 'bench', 'text/plain', 1, 'c', 'v', '{all}', 'mtime', now())"
    )
    conn.execute("DROP INDEX chunks_embedding_hnsw")
    # psycopg has no binary dumper for tsvector; this throwaway database needs no keywords.
    conn.execute("ALTER TABLE chunks ALTER COLUMN keywords SET DEFAULT ''")
    small = rng.random(chunks) < 0.02
    with conn.cursor().copy(
        "COPY chunks (document_id, chunk_index, heading, content, search_text, token_count, "
        "text_sha256, allowed_groups, embedding) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["int8", "int4", "text", "text", "text", "int4", "text", "text[]",
                        "vector"])
        for i, vector in enumerate(vectors):
            groups = ["all", "small"] if small[i] else ["all"]
            copy.write_row((1, i, "", "", "", 10, str(i), groups, vector))
    started = time.perf_counter()
    conn.execute("CREATE INDEX chunks_embedding_hnsw ON chunks "
                 "USING hnsw (embedding vector_cosine_ops)")
    print(f"HNSW build over {chunks} chunks: {time.perf_counter() - started:.0f} s", flush=True)
    conn.execute("ANALYZE chunks")
    return vectors


def exact(conn, query: np.ndarray, group: str, k: int) -> set[int]:  # noqa: ANN001
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        # A query text of its own: psycopg prepares a statement run often, and a plan made
        # without index scans must never serve the approximate queries below.
        rows = conn.execute(
            "SELECT /* exact */ chunk_index FROM chunks WHERE allowed_groups && %s "
            "ORDER BY embedding <=> %s LIMIT %s", ([group], query, k)).fetchall()
    return {r[0] for r in rows}


def approximate(conn, query: np.ndarray, group: str, k: int) -> tuple[set[int], float]:  # noqa: ANN001
    started = time.perf_counter()
    rows = conn.execute(
        "SELECT chunk_index FROM chunks WHERE allowed_groups && %s "
        "ORDER BY embedding <=> %s LIMIT %s", ([group], query, k)).fetchall()
    return {r[0] for r in rows}, (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--k", type=int, default=50, help="the vector leg's LEG_LIMIT")
    args = parser.parse_args()

    home = Path("/tmp") / f"kbret-{uuid.uuid4().hex[:8]}"
    os.environ["KB_HOME"] = str(home)
    os.environ.pop("KB_DATABASE_URL", None)
    from kb_core.database import connect, start_embedded, stop_embedded
    from kb_core.migrations import migrate
    from kb_core.settings import Settings

    settings = Settings.from_env()
    try:
        url = start_embedded(settings)
        migrate(url)
        rng = np.random.default_rng(7)
        with connect(url, autocommit=True) as conn:
            vectors = build(conn, args.chunks, rng)
            picks = rng.integers(0, len(vectors), args.queries)
            queries = vectors[picks] + rng.normal(scale=0.5 / np.sqrt(384),
                                                  size=(args.queries, 384))
            queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
            started = time.perf_counter()
            truth = {g: [exact(conn, q, g, args.k) for q in queries] for g in ("all", "small")}
            print(f"exact search: {(time.perf_counter() - started) * 500 / len(queries):.1f} ms "
                  "per query (mean of both groups)")
            conn.execute("SET hnsw.iterative_scan = 'relaxed_order'")
            for group in ("all", "small"):
                plan = conn.execute(
                    "EXPLAIN SELECT chunk_index FROM chunks WHERE allowed_groups && %s "
                    "ORDER BY embedding <=> %s LIMIT %s", ([group], queries[0], args.k)
                ).fetchall()
                uses = "HNSW index" if "chunks_embedding_hnsw" in str(plan) else "no HNSW index"
                print(f"plan for group {group!r}: {uses}")
            print(f"{'ef_search':>9} {'group':>6} {'recall@' + str(args.k):>10} "
                  f"{'rows':>5} {'p50 ms':>7} {'p95 ms':>7}")
            for ef in (20, 40, 80, 100, 200):
                conn.execute(f"SET hnsw.ef_search = {ef}")
                for group in ("all", "small"):
                    recalls, counts, times = [], [], []
                    for q, expected in zip(queries, truth[group], strict=True):
                        got, ms = approximate(conn, q, group, args.k)
                        recalls.append(len(got & expected) / len(expected))
                        counts.append(len(got))
                        times.append(ms)
                    times.sort()
                    print(f"{ef:>9} {group:>6} {statistics.mean(recalls):>10.3f} "
                          f"{min(counts):>5} {statistics.median(times):>7.1f} "
                          f"{times[int(len(times) * 0.95) - 1]:>7.1f}", flush=True)
    finally:
        stop_embedded(settings)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
