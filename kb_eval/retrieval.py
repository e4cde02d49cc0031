"""Retrieval metrics: pure functions over, per question, the `source_uri` of each ranked hit
(and its text). Hits are chunks, so one document may appear several times; a document's rank
is the rank of its first chunk among the hits (1-based), and each question has one relevant
document. A question that gives its `answer` (a gold span, as the JaQuAD set does) is scored by
passage: a hit counts only when it is a passage of the expected document that contains the
answer (`is_relevant`).

The results are structs that encode to the JSON `kb eval --json` prints: field order is key
order.
"""

from __future__ import annotations

import math

import msgspec
from msgspec import UNSET, UnsetType

from kb_eval.question_sets import EvalQuestion, is_relevant
from kb_eval.rounded import mean

__all__ = ["DEPTH", "Miss", "ModeMetrics", "Recall", "TypeMetrics", "evaluate", "recall_curve"]

DEPTH = 10  # MRR and nDCG are reported at 10 whatever k is


class Miss(msgspec.Struct):
    """A question whose document is not within the top k, and the first three documents found."""

    question: str
    expected_source: str
    top: list[str]


class Recall(msgspec.Struct):
    """Recall at the cutoffs 1, 5 and 10, keyed "1", "5" and "10" in JSON."""

    at_1: float = msgspec.field(name="1")
    at_5: float = msgspec.field(name="5")
    at_10: float = msgspec.field(name="10")


class TypeMetrics(msgspec.Struct):
    """The retrieval metrics of the questions of one type."""

    n: int
    recall: Recall
    mrr_at_10: float


class ModeMetrics(msgspec.Struct):
    """The retrieval metrics of one search mode (`evaluate`)."""

    n: int  # the questions counted: answerable, with an expected_source
    k: int
    recall_at_k: float
    recall: Recall
    mrr_at_10: float
    ndcg_at_10: float
    misses: list[Miss]
    by_type: dict[str, TypeMetrics] | UnsetType = UNSET  # where the set gives types


def evaluate(questions: list[EvalQuestion], hits: list[list[str]], k: int,
             contents: list[list[str]] | None = None) -> ModeMetrics:
    """The `kb eval` metrics of one search mode; hits[i] are question i's ranked source_uris
    and contents[i] their texts (needed to score a question that gives its answer).

    Only answerable questions with an expected_source count; `n` is their number, and every
    metric is 0.0 when there are none. MRR and nDCG are cut off at 10 (a single relevant
    document, so the ideal DCG is 1). Fetch at least max(k, 10) hits per question, or the @10
    metrics undercount. `misses` lists the questions whose document is not within the top k.
    """
    if len(hits) != len(questions):
        raise ValueError(f"{len(questions)} questions but {len(hits)} hit lists")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    ranks: list[int | None] = []
    misses: list[Miss] = []
    types: dict[str, list[int | None]] = {}
    for i, (question, ranked) in enumerate(zip(questions, hits, strict=True)):
        if not question.answerable or not question.expected_source:
            continue
        rank = _first_rank(question, ranked, contents[i] if contents else None)
        ranks.append(rank)
        if question.question_type:
            types.setdefault(question.question_type, []).append(rank)
        if rank is None or rank > k:
            misses.append(Miss(question=question.question,
                               expected_source=question.expected_source,
                               top=_distinct(ranked, 3)))
    return ModeMetrics(
        n=len(ranks),
        k=k,
        recall_at_k=_recall(ranks, k),
        recall=_recalls(ranks),
        mrr_at_10=_mrr(ranks),
        ndcg_at_10=mean([1 / math.log2(rank + 1) if _hit(rank, DEPTH) else 0.0
                         for rank in ranks]),
        misses=misses,
        by_type={t: TypeMetrics(n=len(r), recall=_recalls(r), mrr_at_10=_mrr(r))
                 for t, r in sorted(types.items())} if types else UNSET,
    )


def recall_curve(questions: list[EvalQuestion], hits: list[list[str]],
                 depth: int = DEPTH, contents: list[list[str]] | None = None) -> list[float]:
    """Recall@k for k = 1..depth (the plot of the report); counts as `evaluate` does."""
    ranks = [_first_rank(q, ranked, contents[i] if contents else None)
             for i, (q, ranked) in enumerate(zip(questions, hits, strict=True))
             if q.answerable and q.expected_source]
    return [_recall(ranks, k) for k in range(1, depth + 1)]


def _first_rank(question: EvalQuestion, hits: list[str],
                contents: list[str] | None) -> int | None:
    """The 1-based rank of the first relevant hit (`is_relevant`), or None."""
    for rank, source_uri in enumerate(hits, start=1):
        if is_relevant(question, source_uri, contents[rank - 1] if contents else None):
            return rank
    return None


def _distinct(hits: list[str], limit: int) -> list[str]:
    seen: list[str] = []
    for source_uri in hits:
        if source_uri not in seen:
            seen.append(source_uri)
            if len(seen) == limit:
                break
    return seen


def _recalls(ranks: list[int | None]) -> Recall:
    return Recall(at_1=_recall(ranks, 1), at_5=_recall(ranks, 5), at_10=_recall(ranks, 10))


def _mrr(ranks: list[int | None]) -> float:
    return mean([1 / rank if _hit(rank, DEPTH) else 0.0 for rank in ranks])


def _recall(ranks: list[int | None], cutoff: int) -> float:
    return mean([_hit(rank, cutoff) for rank in ranks])


def _hit(rank: int | None, cutoff: int) -> float:
    return 1.0 if rank is not None and rank <= cutoff else 0.0
