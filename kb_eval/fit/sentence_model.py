"""Fits the extractive answerer's sentence model (kb_search/answerers/sentences.py) from the
development sets that give gold answers and reports its held-out figures; with --write, commits
it to kb_search/answerers/sentences.json.

    KB_HOME=/tmp/kbjq .venv/bin/kb ingest ../shared/devsets/jaquad/docs --groups public
    .venv/bin/python -m kb_eval.fit sentences \\
        --set ../shared/devsets/jaquad/eval.jsonl=/tmp/kbjq:public --cache /tmp/fitcache --write

Every answerable question with a gold answer is searched as `kb ask` searches it, and the
passages the answerer would be given are read by the product's own code
(`candidate_sentences`); a sentence's label is whether it holds the gold answer (NFKC, white
space removed). The model is
a conditional logit: one softmax over a question's candidate sentences, fitted to put the
probability on the sentences holding the answer. How many sentences to quote (`coverage`,
`max_chars`) is chosen to hold the gold answer most often while the answers' median length
stays within MEDIAN_CHARS and their 90th percentile within P90_CHARS. Figures are
cross-validated: five folds grouped by document, each scored by a model and a choice fitted on
the other four.

The passages and their sentences are the engine's own, which its face keeps inside: the fit
reads them through kb_search.grounded_answers.GroundedAnswers and
kb_search.answerers.sentences, as a tuner of the engine may (devsets.searching).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import msgspec
import numpy as np

from kb_eval.fit.devsets import (
    FOLDS,
    Figures,
    fitter_parser,
    folds_by_document,
    installation,
    keep_every_set,
    parse_set,
    searching,
    set_name,
)
from kb_eval.question_sets import holds_answer, load_questions
from kb_search.answerers import ExtractiveAnswerer, Passage
from kb_search.answerers.sentences import (
    FEATURES,
    MODEL_FILE,
    SentenceModel,
    candidate_sentences,
    default_model,
)
from kb_search.grounded_answers import GroundedAnswers
from kb_search.question_parts import split_question

MEDIAN_CHARS = 100  # issue 14: the answer body's median length on the JaQuAD set
P90_CHARS = 250
L2 = 1e-3
STEPS = 500
COVERAGES = tuple(round(0.3 + 0.05 * i, 2) for i in range(14))  # 0.3 .. 0.95
MAX_CHARS = (200, 250, 300)


class Asked(msgspec.Struct):
    question: str
    answer: str
    document: str
    question_type: str | None
    passages: list[Passage]


@dataclasses.dataclass
class Question:
    """A question's candidate sentences: features, labels, lengths; and its type and fold."""

    features: np.ndarray  # sentences x FEATURES
    holds: np.ndarray  # bool: the sentence holds the gold answer
    lengths: np.ndarray
    parts: int  # what the question asks, in parts (QuestionSplit.asked)
    question_type: str
    fold: int


def collect(path: Path, home: Path, groups: list[str], cache: Path | None) -> list[Asked]:
    """The answerable questions with gold answers of the set at `path`, each with the passages
    the installation at `home` gives its answerer; kept in `cache` between runs (delete it
    after changing the index or the search)."""
    kept = cache / f"sentences-{path.stem}-{home.name}.json" if cache else None
    if kept and kept.exists():
        return msgspec.json.decode(kept.read_bytes(), type=list[Asked])
    questions = [q for q in load_questions(path) if q.answerable and q.answer]
    asked = []
    started = time.perf_counter()
    with searching(installation(home)) as (searcher, conn):
        grounded = GroundedAnswers(searcher, ExtractiveAnswerer())
        for q in questions:
            prepared = grounded.retrieve(conn, q.question, list(q.groups or groups))
            asked.append(Asked(q.question, q.answer or "", q.expected_source or "",
                               q.question_type, prepared.passages))
    print(f"{path}: {len(asked)} questions searched in {time.perf_counter() - started:.0f} s",
          file=sys.stderr)
    if kept:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_bytes(msgspec.json.encode(asked))
    return asked


def described(asked: list[Asked]) -> list[Question]:
    folds = folds_by_document([a.document for a in asked])
    questions = []
    for a, fold in zip(asked, folds, strict=True):
        candidates, rows = candidate_sentences(a.question, a.passages)
        questions.append(Question(
            np.array(rows, dtype=float).reshape(len(rows), len(FEATURES)),
            np.array([holds_answer(c.text, a.answer) for c in candidates], dtype=bool),
            np.array([len(c.text) for c in candidates], dtype=float),
            split_question(a.question).asked,
            a.question_type or "all", int(fold)))
    return questions


def fit(questions: list[Question]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, scale, weights) of the conditional logit, by Adam on the mean log-likelihood of
    the sentences holding the answer; questions whose sentences hold none teach nothing."""
    learning = [q for q in questions if q.holds.any()]
    x = np.vstack([q.features for q in learning])
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = (x - mean) / scale
    owner = np.concatenate([np.full(len(q.holds), i) for i, q in enumerate(learning)])
    holds = np.concatenate([q.holds for q in learning])
    weights = np.zeros(z.shape[1])
    moment, second = np.zeros_like(weights), np.zeros_like(weights)
    for step in range(1, STEPS + 1):
        score = z @ weights
        top = np.full(len(learning), -np.inf)
        np.maximum.at(top, owner, score)
        e = np.exp(score - top[owner])
        everything, held = np.zeros(len(learning)), np.zeros(len(learning))
        np.add.at(everything, owner, e)
        np.add.at(held, owner, e * holds)
        # d/dw of -log(sum over holding sentences / sum over all), per question
        share = e / everything[owner] - np.where(holds, e / held[owner], 0.0)
        gradient = (share[:, None] * z).sum(axis=0) / len(learning) + L2 * weights
        moment = 0.9 * moment + 0.1 * gradient
        second = 0.999 * second + 0.001 * gradient**2
        weights -= 0.05 * (moment / (1 - 0.9**step)) / (
            np.sqrt(second / (1 - 0.999**step)) + 1e-8)
    return mean, scale, weights


def quoted(model: SentenceModel, q: Question, scores: np.ndarray) -> tuple[bool, float]:
    """Whether the sentences `model` quotes for `q` (its sentences scoring `scores`) hold the
    answer, and their length."""
    chosen = model.pick(scores.tolist(), q.lengths.tolist(), q.parts)
    return bool(q.holds[chosen].any()), float(q.lengths[chosen].sum())


def scored(model: SentenceModel, questions: list[Question]) -> list[np.ndarray]:
    """Each question's sentence scores under `model` (SentenceModel.scores, vectorized)."""
    weights, mean, scale = (np.array(v) for v in (model.weights, model.mean, model.scale))
    return [((q.features - mean) / scale) @ weights for q in questions]


def figures(model: SentenceModel, questions: list[Question],
            scores: list[np.ndarray]) -> dict[str, float]:
    results = [quoted(model, q, s) for q, s in zip(questions, scores, strict=True)]
    lengths = [length for _, length in results]
    return {"gold in answer": float(np.mean([hit for hit, _ in results])),
            "median chars": float(np.median(lengths)),
            "p90 chars": float(np.quantile(lengths, 0.9))}


def model_of(questions: list[Question], note: str = "") -> SentenceModel:
    """The model fitted on `questions`, quoting as much as the length limits allow there."""
    mean, scale, weights = fit(questions)
    fitted = SentenceModel(list(FEATURES), mean.tolist(), scale.tolist(), weights.tolist(),
                           0.0, 0, note)
    scores = scored(fitted, questions)
    best, best_model = -1.0, None
    for coverage in COVERAGES:
        for max_chars in MAX_CHARS:
            model = msgspec.structs.replace(fitted, coverage=coverage, max_chars=max_chars)
            result = figures(model, questions, scores)
            if (result["median chars"] <= MEDIAN_CHARS and result["p90 chars"] <= P90_CHARS
                    and result["gold in answer"] > best):
                best, best_model = result["gold in answer"], model
    if best_model is None:
        raise SystemExit("no choice of coverage keeps the answers within the length limits")
    return best_model


def gold_in_answer(model: SentenceModel, questions: list[Question]) -> Figures:
    """The figure a fit must keep on every set: the share of its questions whose quoted
    sentences hold the gold answer, in sample, with one question's worth."""
    gold = figures(model, questions, scored(model, questions))["gold in answer"]
    return {"gold in answer": (gold, 1 / len(questions))}


def main(argv: list[str]) -> int:
    parser = fitter_parser("sentences", __doc__, MODEL_FILE)
    parser.add_argument("--cache", type=Path, default=None,
                        help="a folder keeping each set's passages between runs")
    args = parser.parse_args(argv)
    sets = {}
    for spec in args.set:
        path, home, groups = parse_set(spec)
        asked = collect(path, home, groups, args.cache)
        if not asked:
            print(f"{path}: no answerable question gives a gold answer; left out",
                  file=sys.stderr)
            continue
        sets[set_name(path)] = described(asked)
    if not sets:
        raise SystemExit("no set gives gold answers")
    questions = [q for qs in sets.values() for q in qs]
    # Named as the committed model names its fitter (fit/sentences.py, where it was first
    # committed), so a refit of the same sets writes the same file.
    lines = [f"fit/sentences.py, {FOLDS} folds grouped by document; held out:"]
    held_out: dict[str, list[tuple[bool, float]]] = {name: [] for name in sets}
    for fold in range(FOLDS):
        model = model_of([q for q in questions if q.fold != fold])
        for name, qs in sets.items():
            testing = [q for q in qs if q.fold == fold]
            held_out[name] += [quoted(model, q, s) for q, s in
                               zip(testing, scored(model, testing), strict=True)]
    for name, qs in sets.items():
        results = held_out[name]
        lengths = [length for _, length in results]
        by_type: dict[str, list[bool]] = {}
        for q, (hit, _) in zip([q for f in range(FOLDS) for q in qs if q.fold == f], results,
                               strict=True):
            by_type.setdefault(q.question_type, []).append(hit)
        lines.append(
            f"{name}: gold in answer {np.mean([hit for hit, _ in results]):.4f}, "
            f"median {np.median(lengths):.0f} chars, p90 {np.quantile(lengths, 0.9):.0f}; "
            + ", ".join(f"{t} {np.mean(h):.3f}" for t, h in sorted(by_type.items())))
    note = "; ".join(lines)
    print("\n".join(lines))
    model = model_of(questions, note)
    before = default_model() if MODEL_FILE.exists() else None
    keep_every_set({name: gold_in_answer(before, qs) for name, qs in sets.items()} if before
                   else {}, {name: gold_in_answer(model, qs) for name, qs in sets.items()}, args)
    print(f"fitted on everything: coverage {model.coverage}, max {model.max_chars} chars; "
          + ", ".join(f"{f} {w:+.3f}" for f, w in zip(model.features, model.weights,
                                                          strict=True)))
    if args.write:
        MODEL_FILE.write_bytes(msgspec.json.format(msgspec.json.encode(model)) + b"\n")
        print(f"wrote {MODEL_FILE}")
    return 0
