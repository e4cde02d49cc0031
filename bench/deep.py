"""What `bench/service.py --deep` asks and what it prints: the multi-part questions of a
generated set, single questions drawn beside them, and the figures of their answers (scored by
kb_eval/parts.py) with the latency of each kind."""

from __future__ import annotations

import random
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kb_eval.answers import bare_text
from kb_eval.parts import PartsAsked, PartsMetrics, evaluate_parts
from kb_eval.question_sets import EvalQuestion, load_questions, squeezed
from kb_eval.rounded import quantile
from kb_search import AskResult

__all__ = ["Asked", "DeepSet", "LatencyPass", "deep_report", "deep_set", "draw_singles",
           "latency", "question_key"]

SEED = 43  # the draw of the single questions, as the generated set's own seed
WARMUP = 6  # single questions asked before each pass and never measured


@dataclass(frozen=True)
class DeepSet:
    """The questions of one deep bench: multi-part questions, as many single questions (one
    asked after each), and the warm-up questions."""

    multi: list[EvalQuestion]
    singles: list[str]
    warmup: list[str]

    def part_questions(self) -> list[str]:
        """The distinct part questions, in the order they first come."""
        return list(dict.fromkeys(p.question for q in self.multi for p in q.parts or []))

    def fresh(self) -> list[bool]:
        """By multi-part question: whether none of its parts was a part of an earlier one (a
        part asked again may find its embedding kept by the engine)."""
        seen: set[str] = set()
        fresh = []
        for question in self.multi:
            keys = {question_key(p.question) for p in question.parts or []}
            fresh.append(not keys & seen)
            seen |= keys
        return fresh


@dataclass(frozen=True)
class Asked:
    """One request's answer (None: it failed) and the milliseconds it took at the client."""

    answer: AskResult | None
    ms: float


@dataclass(frozen=True)
class LatencyPass:
    """One pass over the set, each multi-part question followed by its single question."""

    multi: list[Asked]
    singles: list[Asked]


def question_key(question: str) -> str:
    """A question as the engine's kept embeddings might match it: NFKC, no spaces, no final
    mark (a part of the "と" form is asked without it)."""
    return squeezed(question).rstrip("?？。")


def draw_singles(singles_file: Path, taken: set[str], count: int,
                 groups: tuple[str, ...]) -> list[str]:
    """`count` answerable single questions of `singles_file` whose key (`question_key`) is not
    in `taken`, asked as `groups` (their own groups, where a line names some, are those), drawn
    with SEED; ValueError when too few are left to draw from."""
    pool: dict[str, str] = {}
    for question in load_questions(singles_file):
        key = question_key(question.question)
        if (question.answerable and not question.parts and key not in taken
                and (question.groups is None or tuple(question.groups) == groups)):
            pool.setdefault(key, question.question)
    if len(pool) < count:
        raise ValueError(f"{singles_file}: {len(pool)} single questions to draw from, "
                         f"{count} needed")
    return random.Random(SEED).sample(sorted(pool.values()), count)


def deep_set(multi_file: Path, singles_file: Path, limit: int | None,
             groups: tuple[str, ...]) -> DeepSet:
    """The first `limit` multi-part questions of `multi_file` and as many answerable single
    questions of `singles_file` (`draw_singles`) that are no part of any question of
    `multi_file` (nor one of them), so that each is asked once; the draw does not depend on
    `limit`, which keeps its prefix.

    Raises ValueError when `multi_file` has a line without parts or `singles_file` too few
    questions to draw from."""
    multi = load_questions(multi_file)
    if bad := [q.question for q in multi if not q.parts]:
        raise ValueError(f"{multi_file}: {len(bad)} lines without parts, the first {bad[0]!r}")
    taken = {question_key(q.question) for q in multi} | {
        question_key(p.question) for q in multi for p in q.parts or []}
    drawn = draw_singles(singles_file, taken, len(multi) + WARMUP, groups)
    count = len(multi) if limit is None else min(limit, len(multi))
    return DeepSet(multi[:count], drawn[:count], drawn[len(multi):])


# ---------------------------------------------------------------------------------------------
# Figures


def latency(asked: Sequence[Asked]) -> tuple[float, float]:
    """Median and p95 of the successful requests' milliseconds (NaN for none)."""
    ms = [a.ms for a in asked if a.answer is not None]
    if not ms:
        return float("nan"), float("nan")
    median, p95 = np.percentile(ms, [50, 95])
    return float(median), float(p95)


def _latency_lines(passes: Sequence[LatencyPass], fresh: list[bool]) -> list[str]:
    per_pass = [(latency(p.multi), latency(p.singles),
                 latency([a for a, f in zip(p.multi, fresh, strict=True) if f]))
                for p in passes]
    lines = ["latency ms, median / p95:"]
    for number, (multi, single, _) in enumerate(per_pass, start=1):
        lines.append(f"  pass {number}: multi-part {multi[0]:.0f} / {multi[1]:.0f}; single "
                     f"{single[0]:.0f} / {single[1]:.0f}; p95 ratio {multi[1] / single[1]:.2f}")
    (m50, m95), (s50, s95), (f50, f95) = [
        [float(np.median([p[kind][i] for p in per_pass])) for i in (0, 1)] for kind in (0, 1, 2)]
    return [*lines,
            f"  medians of the passes: multi-part {m50:.0f} / {m95:.0f} (those whose parts all "
            f"come first in the pass, {sum(fresh)} of {len(fresh)}: {f50:.0f} / {f95:.0f}); "
            f"single {s50:.0f} / {s95:.0f}",
            f"p95 ratio multi-part / single: {m95 / s95:.2f} (target ≤ 2.5)"]


def _chars(answers: Sequence[AskResult]) -> list[float]:
    return sorted(len(bare_text(a.answer)) for a in answers if a.found)


def _quality_lines(metrics: PartsMetrics, singles: Sequence[AskResult],
                   scored: int, left_out: int) -> list[str]:
    held = round(metrics.all_held_rate * metrics.gold)
    held_alone = round(metrics.separate_all_held_rate * metrics.gold)
    chars = _chars(singles)
    lines = [
        f"scored: {scored} multi-part questions ({metrics.parts} parts)"
        + (f"; {left_out} left out, a request of theirs failed" if left_out else ""),
        f"answered part by part: {metrics.answered_in_parts_rate:.1%}; single questions "
        f"answered part by part: {metrics.single_in_parts_rate:.1%}",
        f"every part's document cited: {metrics.part_cited_rate:.1%} of the parts; questions "
        f"citing the documents of all their parts {metrics.all_cited_rate:.1%} (target ≥ 90%)",
        f"both answers held: {metrics.all_held_rate:.1%} ({held} of {metrics.gold}); asked "
        f"separately {metrics.separate_all_held_rate:.1%} ({held_alone}); ratio "
        f"{metrics.held_ratio:.3f} (target ≥ 0.95)",
        f"answer length, characters, median / p90: a part's block "
        f"{metrics.part_chars_median:.0f} / {metrics.part_chars_p90:.0f}; a part asked "
        f"separately {metrics.separate_chars_median:.0f} / {metrics.separate_chars_p90:.0f}; "
        f"a single question {quantile(chars, 0.5):.0f} / {quantile(chars, 0.9):.0f}",
    ]
    if metrics.comparisons_stated:
        lines.append(f"comparisons stated: {metrics.comparisons_stated}, right "
                     f"{metrics.comparisons_right}, wrong {metrics.comparisons_wrong}")
    return lines


def _padded(text: str, width: int) -> str:
    """`text` padded to `width` columns as a terminal shows it (a kanji or kana takes two)."""
    columns = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    return text + " " * max(0, width - columns)


def _ratio(value: float, baseline: float) -> float:
    return value / baseline if baseline else 0.0


def _form_lines(questions: Sequence[EvalQuestion], metrics: PartsMetrics,
                passes: Sequence[LatencyPass], kept: list[int]) -> list[str]:
    lines = [f"{'form':<6} {'n':>4} {'in parts':>9} {'all cited':>10} {'held':>7} "
             f"{'separately':>11} {'ratio':>6} {'median ms':>10} {'p95 ms':>7}"]
    for form, figures in (metrics.by_form or {}).items():
        picked = [i for i, q in enumerate(questions) if q.form == form]
        timings = [latency([p.multi[kept[i]] for i in picked]) for p in passes]
        lines.append(
            f"{_padded(form, 6)} {figures.n:>4} {figures.answered_in_parts_rate:>9.1%} "
            f"{figures.all_cited_rate:>10.1%} {figures.all_held_rate:>7.1%} "
            f"{figures.separate_all_held_rate:>11.1%} "
            f"{_ratio(figures.all_held_rate, figures.separate_all_held_rate):>6.3f} "
            f"{np.median([m for m, _ in timings]):>10.0f} "
            f"{np.median([p for _, p in timings]):>7.0f}")
    return lines


def deep_report(dset: DeepSet, passes: Sequence[LatencyPass],
                separate: dict[str, Asked]) -> list[str]:
    """The bench's closing lines: latency of every pass and the medians, then the first pass's
    answers scored against the parts asked separately (`separate`, by part question), overall
    and per form."""
    first = passes[0]
    errors = sum(a.answer is None for p in passes for a in (*p.multi, *p.singles))
    errors += sum(a.answer is None for a in separate.values())
    lines = [f"n: {len(dset.multi)} multi-part questions, {len(dset.singles)} single questions, "
             f"{len(separate)} distinct parts asked separately; {len(passes)} latency passes; "
             f"failed requests: {errors}"]
    lines += _latency_lines(passes, dset.fresh())
    kept = [i for i, (q, a) in enumerate(zip(dset.multi, first.multi, strict=True))
            if a.answer is not None
            and all(separate[p.question].answer is not None for p in q.parts or [])]
    questions = [dset.multi[i] for i in kept]
    asked = [PartsAsked(answer=first.multi[i].answer, took_ms=first.multi[i].ms,
                        separate=[separate[p.question].answer for p in questions[j].parts or []],
                        separate_ms=[separate[p.question].ms for p in questions[j].parts or []])
             for j, i in enumerate(kept)]
    singles = [a.answer for a in first.singles if a.answer is not None]
    metrics = evaluate_parts(questions, asked, singles)
    lines += _quality_lines(metrics, singles, len(kept), len(dset.multi) - len(kept))
    lines += _form_lines(questions, metrics, passes, kept)
    return lines
