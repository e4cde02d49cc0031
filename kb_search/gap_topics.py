"""Questions no document answers, grouped by topic: the knowledge-gap report's grouping.

Questions are grouped by average-link agglomeration of their question vectors: two groups merge
while the mean cosine similarity between their questions is at least the threshold fitted for
the embedding model (`gap_topics.json`, by `python -m kb_eval.fit gaps`), and never when both name
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

THRESHOLDS_FILE = Path(__file__).with_name("gap_topics.json")


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
    # float32, as the threshold was fitted: kept vectors come back from the database as floats.
    vectors = np.asarray(vectors, dtype=np.float32)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarity = unit @ unit.T
    members = [[i] for i in range(len(questions))]
    group_codes = [set(c) for c in codes]
    alive = np.ones(len(questions), dtype=bool)
    np.fill_diagonal(similarity, -np.inf)
    for i in range(len(questions)):
        if group_codes[i]:
            similarity[i, ~_compatible(group_codes, i)] = -np.inf
    # Each row's best pair, so finding the closest two groups reads a row, not the matrix.
    best = similarity.argmax(axis=1)
    best_value = similarity[np.arange(len(questions)), best]
    while alive.sum() > 1:
        a = int(np.argmax(best_value))
        b = int(best[a])
        if best_value[a] < threshold:
            break
        # Lance-Williams for average link: the merged group's mean similarity to each other.
        na, nb = len(members[a]), len(members[b])
        merged = (na * similarity[a] + nb * similarity[b]) / (na + nb)
        members[a] += members[b]
        members[b] = []
        group_codes[a] |= group_codes[b]
        alive[b] = False
        merged[~alive] = -np.inf
        if group_codes[a]:
            merged[~_compatible(group_codes, a)] = -np.inf
        merged[a] = -np.inf
        similarity[a], similarity[:, a] = merged, merged
        similarity[b], similarity[:, b] = -np.inf, -np.inf
        best_value[b] = -np.inf
        # Rows whose best was a or b look again; the others may now like a best (ties go to
        # the lower index, as an arg-max over the whole matrix would have it).
        stale = alive & ((best == a) | (best == b))
        stale[a] = True
        rows = np.flatnonzero(stale)
        best[rows] = similarity[rows].argmax(axis=1)
        best_value[rows] = similarity[rows, best[rows]]
        better = alive & ~stale & ((merged > best_value) | ((merged == best_value) & (a < best)))
        best[better], best_value[better] = a, merged[better]
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
