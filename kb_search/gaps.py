"""Questions no document answers, grouped by topic: the knowledge-gap report's grouping.

Questions are grouped by average-link agglomeration of their question vectors: two groups merge
while the mean cosine similarity between their questions is at least the threshold fitted for
the embedding model (`gaps.json`, by `python -m kb_eval.fit gaps`), and never when both name
codes (型番, document numbers) and share none: ZP-2041 and ZP-2050 are two gaps however alike
the rest of the question is. Similarities mean something different for every model (e5 crowds
them into 0.8-0.9), so an index built with a model without a fitted threshold is grouped by the
codes its questions share alone.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from kb_search.planner import plan_question

__all__ = ["THRESHOLDS_FILE", "group_questions", "threshold_for"]

THRESHOLDS_FILE = Path(__file__).with_name("gaps.json")


class _Thresholds(msgspec.Struct):
    fitted_on: str  # what the thresholds were fitted on, and how
    thresholds: dict[str, float]  # embedding model → least mean similarity within a group


def threshold_for(model: str) -> float | None:
    """The grouping threshold fitted for `model`; None when there is none."""
    return msgspec.json.decode(THRESHOLDS_FILE.read_bytes(),
                               type=_Thresholds).thresholds.get(model)


def group_questions(questions: list[str], vectors: np.ndarray | None,
                    threshold: float | None) -> list[list[int]]:
    """Groups of `questions` (their indexes, each group in question order, the largest group
    first). `vectors` are their question vectors; without them or a `threshold`, questions
    group by the codes they share."""
    codes = [plan_question(question).codes for question in questions]
    if vectors is None or threshold is None:
        return _by_codes(codes)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarity = unit @ unit.T
    members = [[i] for i in range(len(questions))]
    group_codes = [set(c) for c in codes]
    alive = np.ones(len(questions), dtype=bool)
    np.fill_diagonal(similarity, -np.inf)
    for i in range(len(questions)):
        similarity[i, ~_compatible(group_codes, i)] = -np.inf
    while alive.sum() > 1:
        a, b = np.unravel_index(np.argmax(similarity), similarity.shape)
        if similarity[a, b] < threshold:
            break
        # Lance-Williams for average link: the merged group's mean similarity to each other.
        na, nb = len(members[a]), len(members[b])
        merged = (na * similarity[a] + nb * similarity[b]) / (na + nb)
        members[a] += members[b]
        members[b] = []
        group_codes[a] |= group_codes[b]
        alive[b] = False
        merged[~alive | ~_compatible(group_codes, a)] = -np.inf
        merged[a] = -np.inf
        similarity[a], similarity[:, a] = merged, merged
        similarity[b], similarity[:, b] = -np.inf, -np.inf
    groups = [sorted(m) for m in members if m]
    return sorted(groups, key=lambda g: (-len(g), g[0]))


def _compatible(group_codes: list[set[str]], i: int) -> np.ndarray:
    """Which groups group `i` may merge with: either names no code, or they share one."""
    mine = group_codes[i]
    return np.array([not mine or not theirs or bool(mine & theirs) for theirs in group_codes])


def _by_codes(codes: list[list[str]]) -> list[list[int]]:
    groups: dict[str, list[int]] = {}
    alone = []
    for i, found in enumerate(codes):
        if found:
            groups.setdefault(found[0], []).append(i)
        else:
            alone.append([i])
    return sorted([*groups.values(), *alone], key=lambda g: (-len(g), g[0]))
