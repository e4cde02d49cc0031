"""Fits the fusion of the three legs (kb_search/fusion.py) from the development sets and reports
its held-out figures; with --write, commits it to kb_search/fusion.json.

Each set is indexed in an installation of its own (term statistics are per index):

    .venv/bin/python -m kb_eval.fit fusion \\
        --set samples/eval.jsonl=/tmp/kbdev:all-employees \\
        --set ../shared/devsets/jaquad/eval.jsonl=/tmp/kbjq:public --write

Every answerable question is searched once through the product's hybrid query, which returns
every candidate of both legs (each leg's top 50) with its ranks and evidence; a candidate is
relevant as `kb eval` counts it (a passage of the expected document that holds the gold answer
where the question gives one). The fusion (kb_search.fusion.fuse) is then recomputed here for
each point of a grid of its numbers, and scored by MRR@10 against each set's better leg alone:
the point chosen stands highest above it on the set where it stands lowest, among the points
that keep every set's MRR@10 and recall@5 at least where the committed fusion has them (the
committed fusion among them, so a refit never lowers a set; it prints every set before and
after). Figures are cross-validated: five folds grouped by expected document, each fold scored
with the numbers that were best on the other four.

The fit needs what the engine's face keeps inside: each question's plan and vector, the
candidates of both legs before fusion, and whether each holds the question's codes. It calls
kb_search.search.hybrid_search itself, as a tuner of the engine may (devsets.searching).
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import time
from pathlib import Path

import msgspec
import numpy as np
import psycopg

from kb_eval.fit.devsets import (
    FOLDS,
    fitter_parser,
    folds_by_document,
    installation,
    parse_set,
    searching,
    set_name,
)
from kb_eval.question_sets import is_relevant, load_questions
from kb_search.fusion import FULL_COVERAGE, FUSION_FILE, PLAIN, Fusion, fusion_for
from kb_search.planner import QueryPlan
from kb_search.search import (
    LEG_LIMIT,
    Evidence,
    SearchResult,
    hybrid_search,
)

# A leg alone: the others' votes weigh e^-50 of its own.
VECTOR_ONLY = Fusion(vector_bias=50.0, graph_bias=-50.0)
KEYWORD_ONLY = Fusion(vector_bias=-50.0, graph_bias=-50.0)
NO_GRAPH = -50.0  # the graph_bias of a fusion without the graph leg
GRID = {
    "k": (10.0, 20.0, 30.0, 60.0),
    "vector_bias": (-0.4, -0.2, 0.0, 0.2, 0.4, 0.6),
    "vector_margin": (0.0, 10.0, 20.0, 40.0),
    "keyword_margin": (0.0, 1.0, 2.0, 3.0),
    "graph_bias": (NO_GRAPH, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5),
}


@dataclasses.dataclass
class Candidates:
    """One question's candidates: ranks (0 where a leg did not find it) and evidence."""

    vector_rank: np.ndarray
    keyword_rank: np.ndarray
    graph_rank: np.ndarray
    similarity: np.ndarray
    keyword_score: np.ndarray
    coverage: np.ndarray
    coded: np.ndarray  # holds every code of the question
    relevant: np.ndarray
    keyword_weight: float
    fold: int

    def first_relevant(self, fusions: list[Fusion]) -> np.ndarray:
        """For each fusion, the rank (from 1) of the first relevant passage among the fused
        top 10, 0 when none is there."""
        order = np.argsort(-self.scores(fusions), axis=1, kind="stable")[:, :10]
        relevant = self.relevant[order]
        return np.where(relevant.any(axis=1), relevant.argmax(axis=1) + 1, 0)

    def scores(self, fusions: list[Fusion]) -> np.ndarray:
        """The fused scores of kb_search.fusion.fuse, one row per fusion, vectorised for the
        grid (ties there go to the lower chunk id, here to the earlier candidate: rare enough
        not to move the fit); tests/unit/test_fit_fusion.py holds the two equal on every
        candidate."""
        f = {name: np.array([getattr(x, name) for x in fusions])[:, None]
             for name in ("k", "vector_bias", "vector_margin", "keyword_margin", "graph_bias")}
        found_v, found_k = self.vector_rank > 0, self.keyword_rank > 0
        top_v = np.sort(self.similarity[found_v & (self.vector_rank <= 5)])
        top_k = np.sort(self.keyword_score[found_k & (self.keyword_rank <= 5)])
        margin_v = top_v[-1] - top_v[0] if len(top_v) else 0.0
        margin_k = 1 - top_k[0] / top_k[-1] if len(top_k) and top_k[-1] else 0.0
        vector = np.exp(f["vector_bias"] + f["vector_margin"] * margin_v)
        keyword = self.keyword_weight * np.exp(f["keyword_margin"] * margin_k)
        k = f["k"]
        votes_v = np.where(found_v, 1 / (k + np.maximum(self.vector_rank, 1)), 0)
        votes_k = np.where(found_k, np.minimum(1, self.coverage / FULL_COVERAGE)
                           / (k + np.maximum(self.keyword_rank, 1)), 0)
        votes_g = np.where(self.graph_rank > 0, 1 / (k + np.maximum(self.graph_rank, 1)), 0)
        return (vector * votes_v + keyword * votes_k + np.exp(f["graph_bias"]) * votes_g
                + self.coded / (k + 1))


@dataclasses.dataclass
class DevSet:
    """A development set's questions, and the rank of each one's first relevant passage
    under every fusion of the grid and the legs alone (rows: questions; columns: fusions)."""

    name: str
    embedder: str
    questions: list[Candidates]
    fusions: list[Fusion] = dataclasses.field(default_factory=list)
    ranks: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0)))

    def rank_all(self, fusions: list[Fusion]) -> None:
        self.fusions = fusions
        self.ranks = np.stack([q.first_relevant(fusions) for q in self.questions])

    def in_folds(self, folds: set[int]) -> np.ndarray:
        return np.array([q.fold in folds for q in self.questions])

    def mrr(self, folds: set[int]) -> np.ndarray:
        """MRR@10 of every fusion over the questions of `folds`."""
        ranks = self.ranks[self.in_folds(folds)]
        return np.where(ranks > 0, 1 / np.maximum(ranks, 1), 0).mean(axis=0)

    def recall_at_5(self, folds: set[int]) -> np.ndarray:
        ranks = self.ranks[self.in_folds(folds)]
        return ((ranks > 0) & (ranks <= 5)).mean(axis=0)

    def recall_at_1(self, folds: set[int]) -> np.ndarray:
        return (self.ranks[self.in_folds(folds)] == 1).mean(axis=0)

    def of(self, values: np.ndarray, fusion: Fusion) -> float:
        return float(values[self.fusions.index(fusion)])


def candidates(conn: psycopg.Connection, plan: QueryPlan, result: SearchResult,
               evidence: list[Evidence], relevant: list[bool], fold: int) -> Candidates:
    """A question's candidates, from a search that returned every one of them."""
    ids = [h.chunk_id for h in result.hits]
    # The legs' SQL tests each candidate against the question's codes and keeps the answer to
    # itself (a search's evidence has no `coded`): the same test, asked again. The chunks'
    # alone: the development installations hold no learned fact.
    coded = set() if plan.code_query is None else {row[0] for row in conn.execute(
        "SELECT id FROM chunks WHERE id = ANY(%s) AND keywords @@ %s::tsquery",
        (ids, plan.code_query))}
    return Candidates(
        vector_rank=np.array([h.ranks.vector or 0 for h in result.hits]),
        keyword_rank=np.array([h.ranks.keyword or 0 for h in result.hits]),
        graph_rank=np.array([h.ranks.graph or 0 for h in result.hits]),
        similarity=np.array([e.similarity or 0.0 for e in evidence]),
        keyword_score=np.array([e.keyword_score or 0.0 for e in evidence]),
        coverage=np.array([e.coverage or 0.0 for e in evidence]),
        # As the fusion counts it: only of what the vector or keyword leg found.
        coded=np.array([h.chunk_id in coded and bool(h.ranks.vector or h.ranks.keyword)
                        for h in result.hits], dtype=float),
        relevant=np.array(relevant, dtype=bool),
        keyword_weight=plan.keyword_weight,
        fold=fold,
    )


def collect(path: Path, home: Path, groups: list[str]) -> DevSet:
    questions = [q for q in load_questions(path) if q.answerable]
    folds = folds_by_document([q.expected_source for q in questions])
    collected = []
    started = time.perf_counter()
    with searching(installation(home)) as (searcher, conn):
        for q, fold in zip(questions, folds.tolist(), strict=True):
            caller = list(q.groups if q.groups is not None else groups)
            prepared = searcher.prepare(q.question)
            result, evidence = hybrid_search(conn, prepared.plan, prepared.vector, caller,
                                             3 * LEG_LIMIT)
            relevant = [is_relevant(q, h.source_uri, h.content) for h in result.hits]
            collected.append(candidates(conn, prepared.plan, result, evidence, relevant, fold))
    print(f"{path}: {len(questions)} questions searched in {time.perf_counter() - started:.0f} s",
          file=sys.stderr)
    return DevSet(set_name(path), searcher.model or searcher.configured, collected)


def _grid() -> list[Fusion]:
    return [Fusion(**dict(zip(GRID, values, strict=True)))
            for values in itertools.product(*GRID.values())]


def best(sets: list[DevSet], folds: set[int], graph: bool = True,
         keep: Fusion | None = None) -> Fusion:
    """The grid point whose MRR@10 over `folds` stands highest above each set's better leg, on
    the set where it stands lowest (without the graph leg's votes unless `graph`), among those
    that lower no set's MRR@10 or recall@5 under the fusion `keep` (the one committed before
    the fit), which is itself a candidate. Fusion should never lose to a leg alone; the best
    sum of the sets' MRR@10 let the larger gains of one set pay for a loss on the other (held
    out, our set 0.9687 against its vector leg's 0.9754). And a fit should never buy one set's
    gain with another's loss: the fusion refitted for the graph leg moved JaQuAD's MRR@10 0.9459
    -> 0.9429."""
    margins, floors = [], []
    for s in sets:
        mrr, recall = s.mrr(folds), s.recall_at_5(folds)
        margins.append(mrr - max(s.of(mrr, VECTOR_ONLY), s.of(mrr, KEYWORD_ONLY)))
        floors.append((mrr >= s.of(mrr, keep)) & (recall >= s.of(recall, keep)) if keep
                      else np.ones(len(mrr), dtype=bool))
    worst = np.min(margins, axis=0)
    kept = np.all(floors, axis=0)
    fusions = sets[0].fusions
    allowed = [i for i, f in enumerate(fusions)
               if f not in (VECTOR_ONLY, KEYWORD_ONLY) and kept[i]
               and (graph or f.graph_bias == NO_GRAPH)]
    return fusions[max(allowed, key=lambda i: (worst[i], -i))]


def held_out(sets: list[DevSet], graph: bool,
             keep: Fusion | None) -> dict[str, tuple[float, float]]:
    """Each set's MRR@10 and recall@5, each fold scored with the fusion best on the others."""
    everything = set(range(FOLDS))
    totals = {s.name: [0.0, 0.0] for s in sets}
    for fold in range(FOLDS):
        fitted = best(sets, everything - {fold}, graph, keep)
        for s in sets:
            n = sum(q.fold == fold for q in s.questions)
            totals[s.name][0] += s.of(s.mrr({fold}), fitted) * n
            totals[s.name][1] += s.of(s.recall_at_5({fold}), fitted) * n
    return {s.name: (totals[s.name][0] / len(s.questions), totals[s.name][1] / len(s.questions))
            for s in sets}


def main(argv: list[str]) -> int:
    parser = fitter_parser("fusion", __doc__, FUSION_FILE)
    args = parser.parse_args(argv)
    sets = [collect(*parse_set(spec)) for spec in args.set]
    embedders = {s.embedder for s in sets}
    if len(embedders) != 1:
        raise SystemExit(f"the sets are indexed with different embedders: {embedders}")
    (embedder,) = embedders
    # The committed fusion, if fitted on this embedder: no set may fall below it.
    committed = msgspec.structs.replace(fusion_for(embedder), embedder=None, note="")
    keep = None if committed == PLAIN else committed
    fusions = [*_grid(), PLAIN, VECTOR_ONLY, KEYWORD_ONLY]
    fusions += [keep] if keep and keep not in fusions else []
    for s in sets:
        s.rank_all(fusions)
    everything = set(range(FOLDS))
    with_graph = held_out(sets, graph=True, keep=keep)
    without_graph = held_out(sets, graph=False, keep=None)  # what the graph leg adds
    fitted = best(sets, everything, keep=keep)
    lines = []
    for s in sets:
        (mrr, recall), (mrr_without, recall_without) = with_graph[s.name], without_graph[s.name]
        lines.append(f"{s.name}: held out MRR@10 {mrr:.4f}, R@5 {recall:.4f} (without the "
                     f"graph leg {mrr_without:.4f}, {recall_without:.4f}); "
                     f"plain RRF {s.of(s.mrr(everything), PLAIN):.4f}, "
                     f"vector leg {s.of(s.mrr(everything), VECTOR_ONLY):.4f}, "
                     f"keyword leg {s.of(s.mrr(everything), KEYWORD_ONLY):.4f}")
        print(lines[-1])
    print("every set before and after the fit (in sample):")
    for s in sets:
        mrr, recall = s.mrr(everything), s.recall_at_5(everything)
        first = s.recall_at_1(everything)
        old = (f"{s.of(mrr, keep):.4f}, R@5 {s.of(recall, keep):.4f}, R@1 {s.of(first, keep):.4f}"
               if keep else "none fitted")
        print(f"  {s.name}: MRR@10 before {old}; after {s.of(mrr, fitted):.4f}, "
              f"R@5 {s.of(recall, fitted):.4f}, R@1 {s.of(first, fitted):.4f}")
    # Named as the committed fusion names its fitter (fit/fusion.py, where it was first
    # committed), so a refit of the same sets writes the same file.
    fitted = msgspec.structs.replace(
        fitted, embedder=embedder,
        note="fit/fusion.py, 5 folds grouped by document; " + "; ".join(lines))
    print("fitted on every fold:", msgspec.json.encode(fitted).decode())
    if args.write:
        FUSION_FILE.write_text(msgspec.json.encode(fitted).decode() + "\n", encoding="utf-8")
        print(f"wrote {FUSION_FILE}")
    return 0
