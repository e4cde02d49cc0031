"""How the legs' votes are weighed for each question, from the evidence each leg gives.

Reciprocal Rank Fusion adds 1 / (k + rank) from each leg. With fixed weights it averages a
strong leg with a weak one, and which leg is strong depends on the corpus and the question: a
vector leg whose best passage stands clearly above its fifth knows something, a keyword leg
whose scores are flat does not. So each leg's vote is weighed by its own margin:

    vector vote  = exp(vector_bias + vector_margin * (best similarity - 5th best)) / (k + rank)
    keyword vote = plan weight * exp(keyword_margin * (1 - 5th best score / best score))
                   * min(1, coverage / FULL_COVERAGE) / (k + rank)
    graph vote   = exp(graph_bias) / (k + rank)

plus one rank-1 share, 1 / (k + 1), for a passage holding every code of the question (ZP-2041,
第22条). The plan weight is the planner's lean on the keyword leg (for code questions). The
graph leg (kb_search/graph.py) scores passages by the question's entities, which many passages
share alike: its ties go to the passage the other legs rank higher. The numbers are fitted by
kb_eval/fit/fusion_weights.py from the development sets with cross-validation and committed in
fusion.json. Similarities mean something different for every embedding model, so the fitted
numbers serve only an index of the model they were fitted on; any other index gets plain RRF
(k = 60, no margins, the legs alike), which is what the numbers reduce to at zero.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import NamedTuple

import msgspec

__all__ = ["FULL_COVERAGE", "FUSION_FILE", "PLAIN", "Fused", "Fusion", "fuse", "fusion_for"]

FUSION_FILE = Path(__file__).with_name("fusion.json")
# A keyword hit's vote is scaled by its coverage up to this share of the question's informative
# term weight: one that shares a few common 2-grams with the question (何日, 取れ) is a weak
# vote. On samples/eval.jsonl the keyword leg's first hit was the right document for 10 of 18
# questions whose best coverage was under 0.3, and for 91 of 94 at 0.5 or more (dev-set
# figures; the threshold is a round number, not a fitted one).
FULL_COVERAGE = 0.5


class Fusion(msgspec.Struct, frozen=True):
    k: float = 60.0  # RRF's constant: how fast a vote falls with rank
    vector_bias: float = 0.0  # log of the vector leg's weight against the keyword leg's
    vector_margin: float = 0.0  # how much the vector leg's margin raises its weight
    keyword_margin: float = 0.0  # how much the keyword leg's margin raises its weight
    graph_bias: float = 0.0  # log of the graph leg's weight against the keyword leg's
    embedder: str | None = None  # the model it was fitted on; None: any
    note: str = ""  # how it was fitted, with the held-out figures


PLAIN = Fusion()
_NOT_FOUND = (math.inf,)  # the rank of a passage a leg did not find


def fusion_for(model: str | None) -> Fusion:
    """The fitted fusion for an index of embedding `model`, or plain RRF for any other."""
    fitted = _fitted()
    return fitted if model is not None and fitted.embedder == model else PLAIN


@cache
def _fitted() -> Fusion:
    return msgspec.json.decode(FUSION_FILE.read_bytes(), type=Fusion)


class Fused(NamedTuple):
    """A passage as the fusion ranks it, with each leg's rank and evidence (None: not found)."""

    id: int
    score: float
    vector_rank: int | None
    keyword_rank: int | None
    graph_rank: int | None
    similarity: float | None
    keyword_score: float | None
    coverage: float | None


def fuse(vector: list[tuple[int, float, bool]], keyword: list[tuple[int, float, float, bool]],
         graph: list[tuple[int, float]], fusion: Fusion, keyword_weight: float,
         k: int) -> list[Fused]:
    """The best `k` of the legs' passages, each leg's given best first: the vector leg's as
    (id, similarity, holds every code), the keyword leg's as (id, score, coverage, holds every
    code), the graph leg's as (id, score). Ties go to the lower id."""
    top_v = [similarity for _, similarity, _ in vector[:5]]
    top_k = [score for _, score, _, _ in keyword[:5]]
    weight_v = math.exp(fusion.vector_bias
                        + fusion.vector_margin * (max(top_v) - min(top_v) if top_v else 0.0))
    margin_k = 1 - min(top_k) / max(top_k) if top_k and max(top_k) else 0.0
    weight_k = keyword_weight * math.exp(fusion.keyword_margin * margin_k)
    by_vector = {id_: (rank, similarity)
                 for rank, (id_, similarity, _) in enumerate(vector, start=1)}
    by_keyword = {id_: (rank, score, coverage)
                  for rank, (id_, score, coverage, _) in enumerate(keyword, start=1)}
    coded = {row[0] for row in [*vector, *keyword] if row[-1]}
    weight_g = math.exp(fusion.graph_bias)
    by_graph = {id_: rank for rank, (id_, _) in enumerate(sorted(graph, key=lambda row: (
        -row[1], min(by_vector.get(row[0], _NOT_FOUND)[0], by_keyword.get(row[0], _NOT_FOUND)[0]),
        row[0])), start=1)}
    fused = []
    for id_ in by_vector.keys() | by_keyword.keys() | by_graph.keys():
        vector_rank = similarity = keyword_rank = keyword_score = coverage = None
        graph_rank = by_graph.get(id_)
        score = 1 / (fusion.k + 1) if id_ in coded else 0.0
        if id_ in by_vector:
            vector_rank, similarity = by_vector[id_]
            score += weight_v / (fusion.k + vector_rank)
        if id_ in by_keyword:
            keyword_rank, keyword_score, coverage = by_keyword[id_]
            score += weight_k * min(1, coverage / FULL_COVERAGE) / (fusion.k + keyword_rank)
        if graph_rank is not None:
            score += weight_g / (fusion.k + graph_rank)
        fused.append(Fused(id_, score, vector_rank, keyword_rank, graph_rank, similarity,
                           keyword_score, coverage))
    return sorted(fused, key=lambda f: (-f.score, f.id))[:k]
