"""The vector leg's unit: how well each way of embedding a chunk finds the passage that holds
the answer, and what it costs to ingest.

    .venv/bin/python bench/views.py --set samples/eval.jsonl=/tmp/kbdev \
        --set ../shared/devsets/jaquad/eval.jsonl=/tmp/kbjq --views 128:32 200:32 512:0

Each --set names a question file and an installation (KB_HOME) where its documents are
indexed. For every configuration MAX:OVERLAP, each indexed chunk is cut into embedding views of
at most MAX tokens overlapping by about OVERLAP (kb_pipeline.chunking.embedding_views; 512,
above any chunk's size, gives one vector per chunk), a chunk scores its best view's cosine
with the question, and the vector leg's ranking over all chunks is scored as `kb eval` scores
it: passage level where the question gives its answer (a chunk of the expected document that
contains it), document level otherwise. The line `indexed` is the installation's own vectors.

Ingestion cost per configuration: views per chunk, e5 tokens embedded per document, and the
seconds the embedder took per document for the views it had to embed here (texts already in
the installation's embedding cache cost nothing, and are reported as cached). Vectors embedded
here are added to that cache: a rebuild with the chosen configuration re-embeds none of them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _configs(values: list[str]) -> list[tuple[int, int]]:
    return [(int(size), int(overlap)) for size, overlap in (v.split(":") for v in values)]


def _chunks(conn):  # noqa: ANN001, ANN202
    from kb_pipeline.chunking import Chunk

    rows = conn.execute(
        "SELECT c.id, d.source_uri, c.heading, c.location, c.content, c.search_text, "
        "c.token_count FROM chunks c JOIN documents d ON d.id = c.document_id ORDER BY c.id"
    ).fetchall()
    chunks = [Chunk(index=0, heading=r[2], location=r[3], content=r[4], text=r[5],
                    token_count=r[6]) for r in rows]
    return [r[0] for r in rows], [r[1] for r in rows], chunks


def _indexed_scores(conn, ids: list[int], questions: np.ndarray) -> np.ndarray:  # noqa: ANN001
    position = {chunk_id: i for i, chunk_id in enumerate(ids)}
    owners, vectors = [], []
    for chunk_id, vector in conn.execute("SELECT chunk_id, embedding FROM chunk_vectors"):
        owners.append(position[chunk_id])
        vectors.append(np.asarray(vector, dtype=np.float32))
    return _best_view(questions @ np.stack(vectors).T, np.array(owners), len(ids))


def _best_view(similarity: np.ndarray, owners: np.ndarray, chunks: int) -> np.ndarray:
    """Each chunk's score: its best view's similarity (columns of `similarity` are views)."""
    order = np.argsort(owners, kind="stable")  # every chunk has at least one view
    starts = np.searchsorted(owners[order], np.arange(chunks))
    return np.maximum.reduceat(similarity[:, order], starts, axis=1)


def _cached(conn, model: str, shas: list[str]) -> dict[str, np.ndarray]:  # noqa: ANN001
    return {sha: np.asarray(vector, dtype=np.float32) for sha, vector in conn.execute(
        "SELECT text_sha256, embedding FROM embedding_cache "
        "WHERE model = %s AND text_sha256 = ANY(%s)", (model, shas))}


def _embed_views(conn, embedder, texts: list[str]) -> tuple[np.ndarray, int, float]:  # noqa: ANN001
    """Vectors of `texts` from the cache or the embedder; how many were embedded, in seconds."""
    import hashlib

    from kb_pipeline.stages import cache_embeddings

    shas = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    known = _cached(conn, embedder.name, sorted(set(shas)))
    todo = sorted({sha: t for sha, t in zip(shas, texts, strict=True) if sha not in known}.items())
    seconds = 0.0
    for start in range(0, len(todo), 32):
        batch = todo[start:start + 32]
        began = time.perf_counter()
        vectors = np.asarray(embedder.embed_documents([t for _, t in batch]), np.float32)
        seconds += time.perf_counter() - began
        cache_embeddings(conn, embedder.name, [sha for sha, _ in batch], vectors)
        known.update(zip([sha for sha, _ in batch], vectors, strict=True))
    return np.stack([known[sha] for sha in shas]), len(todo), seconds


def _score(label: str, scores: np.ndarray, relevant: list[set[int]], extra: str = "") -> None:
    mrr = r1 = r5 = 0.0
    for row, wanted in zip(scores, relevant, strict=True):
        top = np.argsort(-row, kind="stable")[:10]
        rank = next((k for k, chunk in enumerate(top, 1) if chunk in wanted), None)
        if rank:
            mrr += 1 / rank
            r1 += rank == 1
            r5 += rank <= 5
    n = len(relevant)
    print(f"  {label:<12} MRR@10 {mrr / n:.4f}  R@1 {r1 / n:.4f}  R@5 {r5 / n:.4f}  {extra}",
          flush=True)


def bench_set(eval_path: Path, home: Path, configs: list[tuple[int, int]]) -> None:
    from kb_cli.database import prepare_database
    from kb_core.database import connect
    from kb_core.embeddings import make_embedder
    from kb_core.settings import Settings
    from kb_pipeline.chunking import embedding_views
    from kb_search.evaluation import holds_answer, load_questions, source_matches

    settings = prepare_database(Settings.from_env({"KB_HOME": str(home)}))
    embedder = make_embedder(settings.embedder)
    questions = [q for q in load_questions(eval_path) if q.answerable]
    with connect(settings.database_url, autocommit=True) as conn:
        ids, uris, chunks = _chunks(conn)
        documents = len(set(uris))
        relevant = [
            {i for i, uri in enumerate(uris) if source_matches(uri, q.expected_source or "")
             and (q.answer is None or holds_answer(chunks[i].content, q.answer))}
            for q in questions
        ]
        began = time.perf_counter()
        vectors = np.stack([embedder.embed_query(q.question) for q in questions])
        print(f"{eval_path} on {home}: {len(questions)} answerable questions, {len(chunks)} "
              f"chunks of {documents} documents (questions embedded in "
              f"{time.perf_counter() - began:.0f} s)", flush=True)
        _score("indexed", _indexed_scores(conn, ids, vectors), relevant)
        for size, overlap in configs:
            views = [embedding_views(c, embedder.count_tokens, size, overlap) for c in chunks]
            texts = [t for v in views for t in v]
            owners = np.array([i for i, v in enumerate(views) for _ in v])
            view_vectors, embedded, seconds = _embed_views(conn, embedder, texts)
            tokens = sum(embedder.count_tokens(t) for t in texts)
            per_view = seconds / embedded if embedded else float("nan")
            cost = (f"views/chunk {len(texts) / len(chunks):.2f}  views/doc "
                    f"{len(texts) / documents:.1f}  tokens/doc {tokens / documents:.0f}  "
                    f"s/doc {per_view * len(texts) / documents:.1f} (from the {embedded} "
                    f"embedded here; {len(texts) - embedded} were cached)")
            _score(f"{size}:{overlap}", _best_view(vectors @ view_vectors.T, owners, len(chunks)),
                   relevant, cost)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, metavar="EVAL=KB_HOME",
                        help="a question file and the installation its documents are in")
    parser.add_argument("--views", nargs="+", default=["128:32", "200:32", "512:0"],
                        metavar="MAX:OVERLAP", help="embedding view configurations to compare")
    args = parser.parse_args()
    for pair in args.set:
        eval_path, home = pair.split("=", 1)
        bench_set(Path(eval_path), Path(home), _configs(args.views))


if __name__ == "__main__":
    main()
