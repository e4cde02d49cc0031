"""The refusal curve: what "not found" costs and catches as the answerability threshold moves
(KB_MAX_FALSE_NOT_FOUND picks a point on it)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from kb_eval.question_sets import EvalQuestion
from kb_eval.rounded import rate

__all__ = ["RefusalPoint", "refusal_curve"]


class RefusalPoint(msgspec.Struct):
    """"Not found" at one answerability threshold: what it costs and what it catches."""

    threshold: float
    answerable_refused: float  # share of answerable questions refused
    not_found_recall: float
    not_found_precision: float


def refusal_curve(questions: Sequence[EvalQuestion], refused_by_rule: Sequence[bool],
                  probabilities: Sequence[float], points: int = 40) -> list[RefusalPoint]:
    """"Not found" precision and recall against the share of answerable questions refused,
    at thresholds spread over the answerable questions' probabilities."""
    answerable = [p for q, p in zip(questions, probabilities, strict=True) if q.answerable]
    if not answerable or all(q.answerable for q in questions):
        return []
    ordered = sorted(answerable)
    # From 0 (the rules alone) up to the probability that refuses a quarter of them.
    thresholds = sorted({0.0} | {ordered[min(len(ordered) - 1, int(len(ordered) * i / points / 4))]
                                 for i in range(points + 1)})
    curve = []
    for threshold in thresholds:
        said = [rule or p < threshold
                for rule, p in zip(refused_by_rule, probabilities, strict=True)]
        refused = [s for q, s in zip(questions, said, strict=True) if q.answerable]
        caught = [s for q, s in zip(questions, said, strict=True) if not q.answerable]
        true_not_found = sum(caught)
        curve.append(RefusalPoint(
            threshold=round(threshold, 4), answerable_refused=rate(sum(refused), len(refused)),
            not_found_recall=rate(true_not_found, len(caught)),
            not_found_precision=rate(true_not_found, sum(said))))
    return curve
