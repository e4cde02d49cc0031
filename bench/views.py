"""The vector leg's unit: how well each way of embedding a chunk finds the passage that holds
the answer, and what it costs to ingest.

    .venv/bin/python bench/views.py --set samples/eval.jsonl=/tmp/kbdev:all-employees \
        --set ../shared/devsets/jaquad/eval.jsonl=/tmp/kbjq:public --views 128:32 200:32 512:0

Each --set names a question file, an installation (KB_HOME) where its documents are indexed,
and the groups of questions that name none. For every configuration MAX:OVERLAP, each indexed
chunk is cut into embedding views of at most MAX tokens overlapping by about OVERLAP
(kb_pipeline.chunking.embedding_views; 512, above any chunk's size, gives one vector per
chunk), a chunk scores its best view's cosine with the question (embedded as the vector leg
embeds it), and the exact ranking over the chunks the question's groups may read is scored as
`kb eval` scores it: passage level where the question gives its answer (a chunk of the expected
document that contains it), document level otherwise. The line `indexed` is the installation's
own vectors.

Ingestion cost per configuration: views per chunk, e5 tokens embedded per document, and the
embedder's seconds per document, timed on --timed views drawn evenly from the configuration's
own (their mix of lengths is the configuration's) whether or not they are cached. Vectors
embedded here are added to the installation's embedding cache: a rebuild with the chosen
configuration re-embeds none of them.
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
        "c.token_count, c.allowed_groups FROM chunks c JOIN documents d ON d.id = c.document_id "
        "ORDER BY c.id"
    ).fetchall()
    chunks = [Chunk(index=0, heading=r[2], location=r[3], content=r[4], text=r[5],
                    token_count=r[6]) for r in rows]
    return [r[0] for r in rows], [r[1] for r in rows], chunks, [set(r[7]) for r in rows]


def _indexed_scores(conn, ids: list[int], questions: np.ndarray) -> np.ndarray:  # noqa: ANN001
    position = {chunk_id: i for i, chunk_id in enumerate(ids)}
    owners, vectors = [], []
    for chunk_id, vector in conn.execute("SELECT chunk_id, embedding FROM chunk_vectors"):
        owners.append(position[chunk_id])
        vectors.append(vector.to_numpy())
    return _best_view(questions @ np.stack(vectors).T, np.array(owners), len(ids))


def _best_view(similarity: np.ndarray, owners: np.ndarray, chunks: int) -> np.ndarray:
    """Each chunk's score: its best view's similarity (columns of `similarity` are views)."""
    order = np.argsort(owners, kind="stable")  # every chunk has at least one view
    starts = np.searchsorted(owners[order], np.arange(chunks))
    return np.maximum.reduceat(similarity[:, order], starts, axis=1)


def _cached(conn, model: str, shas: list[str]) -> dict[str, np.ndarray]:  # noqa: ANN001
    return {sha: vector.to_numpy() for sha, vector in conn.execute(
        "SELECT text_sha256, embedding FROM embedding_cache "
        "WHERE model = %s AND text_sha256 = ANY(%s)", (model, shas))}


def _embed_views(conn, embedder, texts: list[str]) -> np.ndarray:  # noqa: ANN001
    """Vectors of `texts`, from the cache or else embedded (and cached)."""
    import hashlib

    from kb_pipeline.stages import cache_embeddings

    shas = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    known = _cached(conn, embedder.name, sorted(set(shas)))
    todo = sorted({sha: t for sha, t in zip(shas, texts, strict=True) if sha not in known}.items())
    for start in range(0, len(todo), 32):
        batch = todo[start:start + 32]
        vectors = np.asarray(embedder.embed_documents([t for _, t in batch]), np.float32)
        cache_embeddings(conn, embedder.name, [sha for sha, _ in batch], vectors)
        known.update(zip([sha for sha, _ in batch], vectors, strict=True))
    return np.stack([known[sha] for sha in shas])


def _seconds_per_view(embedder, texts: list[str], timed: int) -> float:  # noqa: ANN001
    sample = texts[:: max(1, len(texts) // timed)][:timed]
    began = time.perf_counter()
    for start in range(0, len(sample), 32):
        embedder.embed_documents(sample[start:start + 32])
    return (time.perf_counter() - began) / len(sample)


def _score(label: str, scores: np.ndarray, relevant: list[set[int]], visible: np.ndarray,
           extra: str = "") -> None:
    mrr = r1 = r5 = 0.0
    for row, wanted in zip(np.where(visible, scores, -np.inf), relevant, strict=True):
        top = np.argsort(-row, kind="stable")[:10]
        rank = next((k for k, chunk in enumerate(top, 1) if chunk in wanted), None)
        if rank:
            mrr += 1 / rank
            r1 += rank == 1
            r5 += rank <= 5
    n = len(relevant)
    print(f"  {label:<12} MRR@10 {mrr / n:.4f}  R@1 {r1 / n:.4f}  R@5 {r5 / n:.4f}  {extra}",
          flush=True)


def bench_set(eval_path: Path, home: Path, groups: list[str], configs: list[tuple[int, int]],
              timed: int) -> None:
    from kb_core.database import connect
    from kb_core.embeddings import make_embedder
    from kb_core.migrations import prepare_database
    from kb_core.settings import Settings
    from kb_eval.question_sets import is_relevant, load_questions
    from kb_pipeline.chunking import embedding_views
    from kb_search.search import Searcher
    from kb_search.synonyms import Synonyms

    settings = prepare_database(Settings.from_env({"KB_HOME": str(home)}))
    embedder = make_embedder(settings.embedder)
    questions = [q for q in load_questions(eval_path) if q.answerable]
    with connect(settings.database_url, autocommit=True) as conn:
        ids, uris, chunks, readers = _chunks(conn)
        visible = np.array([[bool(r & set(q.groups or groups)) for r in readers]
                            for q in questions])
        documents = len(set(uris))
        relevant = [{i for i, uri in enumerate(uris) if is_relevant(q, uri, chunks[i].content)}
                    for q in questions]
        began = time.perf_counter()
        # Questions embedded as the vector leg embeds them (planned, with the synonyms): what
        # the engine's face keeps inside, so its searcher is built here as bench/search.py's is.
        searcher = Searcher(settings.embedder, Synonyms(settings.synonyms))
        searcher.follow(conn)
        vectors = np.stack([searcher.prepare(q.question).vector for q in questions])
        print(f"{eval_path} on {home}: {len(questions)} answerable questions, {len(chunks)} "
              f"chunks of {documents} documents (questions embedded in "
              f"{time.perf_counter() - began:.0f} s)", flush=True)
        _score("indexed", _indexed_scores(conn, ids, vectors), relevant, visible)
        for size, overlap in configs:
            views = [embedding_views(c, embedder.count_tokens, size, overlap) for c in chunks]
            texts = [t for v in views for t in v]
            owners = np.array([i for i, v in enumerate(views) for _ in v])
            view_vectors = _embed_views(conn, embedder, texts)
            tokens = sum(embedder.count_tokens(t) for t in texts)
            per_view = _seconds_per_view(embedder, texts, timed)
            cost = (f"views/chunk {len(texts) / len(chunks):.2f}  views/doc "
                    f"{len(texts) / documents:.1f}  tokens/doc {tokens / documents:.0f}  "
                    f"s/doc {per_view * len(texts) / documents:.1f}")
            _score(f"{size}:{overlap}", _best_view(vectors @ view_vectors.T, owners, len(chunks)),
                   relevant, visible, cost)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, metavar="EVAL=HOME:GROUPS",
                        help="a question set, the KB_HOME that indexes it, its default groups")
    parser.add_argument("--views", nargs="+", default=["128:32", "200:32", "512:0"],
                        metavar="MAX:OVERLAP", help="embedding view configurations to compare")
    parser.add_argument("--timed", type=int, default=96,
                        help="views embedded once more per configuration, for its cost")
    args = parser.parse_args()
    for spec in args.set:
        eval_path, _, rest = spec.partition("=")
        home, _, groups = rest.partition(":")
        bench_set(Path(eval_path), Path(home), [g for g in groups.split(",") if g],
                  _configs(args.views), args.timed)


if __name__ == "__main__":
    main()
