"""Fits the knowledge-gap report's grouping threshold (kb_search/gap_topics.py) on questions
labelled by topic, and reports its grouping purity; with --write, commits it to
kb_search/gap_topics.json.

    .venv/bin/python -m kb_eval.fit gaps --labels samples/gap_topics.jsonl [--write]

The questions are embedded as the report embeds them (the configured embedder, KB_EMBEDDER;
the threshold is kept for that model). For each threshold on a grid the questions are grouped
and scored: purity (the share of questions in a group whose most common topic is their own) and
inverse purity (the share in the group holding most of their topic), and their harmonic mean
F. The threshold kept is the middle of the widest run of thresholds with the best F, so it sits
away from both edges. Figures are cross-validated by topic: five folds of topics, each grouped
with the threshold fitted on the other four.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

import msgspec
import numpy as np

from kb_core.embeddings import make_embedder
from kb_core.settings import Settings
from kb_eval.fit.devsets import Figures, keep_every_set
from kb_search.gap_topics import THRESHOLDS_FILE, group_questions

GRID = [round(t, 3) for t in np.arange(0.78, 0.96, 0.005)]
FOLDS = 5


def purity(groups: list[list[int]], topics: list[str]) -> tuple[float, float]:
    """Purity and inverse purity of `groups` against the labelled `topics`."""
    total = sum(len(g) for g in groups)
    pure = sum(Counter(topics[i] for i in g).most_common(1)[0][1] for g in groups)
    where: dict[str, list[int]] = defaultdict(list)
    for number, group in enumerate(groups):
        for i in group:
            where[topics[i]].append(number)
    inverse = sum(Counter(places).most_common(1)[0][1] for places in where.values())
    return pure / total, inverse / total


def _f(scores: tuple[float, float]) -> float:
    p, inverse = scores
    return 2 * p * inverse / (p + inverse) if p + inverse else 0.0


def fit(questions: list[str], topics: list[str], vectors: np.ndarray) -> float:
    """The middle of the widest run of grid thresholds with the best F on these questions."""
    f = [round(_f(purity(group_questions(questions, vectors, t), topics)), 6) for t in GRID]
    best = max(f)
    runs: list[list[float]] = []
    for threshold, score in zip(GRID, f, strict=True):
        if score == best and runs and runs[-1][-1] == GRID[GRID.index(threshold) - 1]:
            runs[-1].append(threshold)
        elif score == best:
            runs.append([threshold])
    widest = max(runs, key=len)
    return widest[len(widest) // 2]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m kb_eval.fit gaps",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--labels", type=Path, required=True,
                        help='JSON lines {"question": ..., "topic": ...}')
    parser.add_argument("--write", action="store_true", help=f"write {THRESHOLDS_FILE.name}")
    parser.add_argument("--accept-loss", action="store_true",
                        help="write even where the grouping's F falls below its figure before "
                             "the fit")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in args.labels.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    questions, topics = [r["question"] for r in rows], [r["topic"] for r in rows]
    embedder = make_embedder(Settings.from_env().embedder)
    vectors = np.array([embedder.embed_query(q) for q in questions])

    names = sorted(set(topics))
    held: list[tuple[float, float]] = []
    for fold in range(FOLDS):
        test = {name for n, name in enumerate(names) if n % FOLDS == fold}
        train = [i for i, t in enumerate(topics) if t not in test]
        tested = [i for i, t in enumerate(topics) if t in test]
        threshold = fit([questions[i] for i in train], [topics[i] for i in train],
                        vectors[train])
        groups = group_questions([questions[i] for i in tested], vectors[tested], threshold)
        held.append(purity(groups, [topics[i] for i in tested]))
        print(f"fold {fold + 1}: threshold {threshold}, held-out purity {held[-1][0]:.3f}, "
              f"inverse purity {held[-1][1]:.3f}")
    threshold = fit(questions, topics, vectors)
    whole = purity(group_questions(questions, vectors, threshold), topics)
    print(f"{embedder.name}: {len(questions)} questions in {len(names)} topics; threshold "
          f"{threshold}; cross-validated purity {np.mean([h[0] for h in held]):.3f}, inverse "
          f"purity {np.mean([h[1] for h in held]):.3f}; fitted on all: {whole[0]:.3f} / "
          f"{whole[1]:.3f}")
    kept = msgspec.json.decode(THRESHOLDS_FILE.read_bytes()) if THRESHOLDS_FILE.exists() \
        else {"thresholds": {}}
    before = kept["thresholds"].get(embedder.name)

    def f_of(scores: tuple[float, float]) -> dict[str, Figures]:  # the F a fit must keep
        return {args.labels.name: {"F": (_f(scores), 1 / len(questions))}}

    keep_every_set(f_of(purity(group_questions(questions, vectors, before), topics))
                   if before is not None else {}, f_of(whole), args)
    if args.write:
        kept["thresholds"][embedder.name] = threshold
        kept["fitted_on"] = (f"{args.labels.name}: {len(questions)} questions in {len(names)} "
                             "topics (python -m kb_eval.fit gaps)")
        THRESHOLDS_FILE.write_text(json.dumps(kept, ensure_ascii=False, indent=2) + "\n",
                                   encoding="utf-8")
        print(f"written: {THRESHOLDS_FILE}")
    return 0
