"""Multi-part answers (Deep mode): pure functions over the answer each multi-part question of a
set was given, beside the answers its parts get when asked one by one in mode "flash" (the
baseline: what a user who splits the question themself reads).

A part's document and gold answer are looked for in the whole answer, not in the engine's own
parts: the engine may split a question otherwise than the set does, or answer it whole when one
passage answers every part. A part that no document the caller may read answers (answerable:
false) must be named "not found" among the answer's parts.

The results are structs that encode to the "parts" object of `kb eval --json`: field order is
key order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
from msgspec import UNSET, UnsetType

from kb_eval.answers import bare_text
from kb_eval.question_sets import EvalPart, EvalQuestion, holds_answer, source_matches, squeezed
from kb_eval.rounded import quantile, rate
from kb_search import AskResult

__all__ = [
    "FormMetrics",
    "PartsAsked",
    "PartsMetrics",
    "WrongParts",
    "comparison_right",
    "evaluate_parts",
    "part_blocks",
]


class PartsAsked(msgspec.Struct):
    """A multi-part question as the evaluation put it: its answer, and each of its parts asked
    alone in mode "flash" (in the set's order), with the milliseconds each took."""

    answer: AskResult
    took_ms: float
    separate: list[AskResult]
    separate_ms: list[float]


class WrongParts(msgspec.Struct):
    """A multi-part answer that failed a measure, with the reasons."""

    question: str
    answer: str  # its first 120 characters
    reasons: list[str]


class FormMetrics(msgspec.Struct):
    """The headline measures of some multi-part questions (all, or those joined in one form)."""

    n: int
    answered_in_parts_rate: float  # answered part by part (AskResult.parts not empty)
    # Of the questions with an answerable part: those whose answer cites the document of every
    # answerable part.
    all_cited_rate: float
    # Of the questions whose answerable parts all give a gold answer: those whose answer holds
    # every one, and those whose parts, asked alone, each get an answer holding its own.
    all_held_rate: float
    separate_all_held_rate: float


class PartsMetrics(FormMetrics):
    """The measures of a set's multi-part questions (`evaluate_parts`)."""

    parts: int
    part_cited_rate: float  # answerable parts whose document the answer cites
    gold: int  # the questions all_held_rate counts
    # all_held_rate over separate_all_held_rate (0.0 when the latter is).
    held_ratio: float
    unanswerable_parts: int
    unanswerable_answered: int  # of them, not named "not found" among the answer's parts
    comparisons_stated: int
    comparisons_right: int  # each value stated is its part's gold answer (`comparison_right`)
    comparisons_wrong: int
    # The length of an answered part's block (`part_blocks`), against a part's answer asked
    # alone (found, [n] removed).
    part_chars_median: float
    part_chars_p90: float
    separate_chars_median: float
    separate_chars_p90: float
    latency_ms_median: float
    latency_ms_p95: float
    separate_latency_ms_median: float  # of each part asked alone
    separate_latency_ms_p95: float
    # The set's single questions (one document each) answered part by part.
    single_questions: int
    single_in_parts_rate: float
    wrong: list[WrongParts]
    by_form: dict[str, FormMetrics] | UnsetType = UNSET  # where the set gives forms


# An answered part's block: its 【label】 line, then its text up to the next blank line.
_BLOCK = re.compile(r"(?:\A|\n\n)【[^】\n]*】\n(?P<text>.*?)(?=\n\n|\Z)", re.DOTALL)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def part_blocks(answer: str) -> list[str]:
    """The text of each answered part's block of a multi-part answer, [n] removed; none for an
    answer given whole."""
    return [bare_text(block["text"]) for block in _BLOCK.finditer(answer)]


def comparison_right(values: Sequence[str], parts: Sequence[EvalPart]) -> bool:
    """Whether the values a comparison states, in part order, are the parts' gold answers: each
    in its part's gold answer, or that in it, NFKC, spaces and thousands separators removed,
    and not inside a longer number (8日 is not in 28日前)."""
    if len(values) != len(parts):
        return False
    return all(part.answer is not None and (_within(_bare(part.answer), _bare(value))
                                            or _within(_bare(value), _bare(part.answer)))
               for value, part in zip(values, parts, strict=True))


def _bare(text: str) -> str:
    return _THOUSANDS.sub("", squeezed(text))


def _within(text: str, value: str) -> bool:
    before = r"(?<![\d.])" if value[:1].isdigit() else ""
    after = r"(?!\d|\.\d)" if value[-1:].isdigit() else ""
    return bool(value) and re.search(before + re.escape(value) + after, text) is not None


@dataclass(frozen=True)
class _Scored:
    """One multi-part answer's verdicts."""

    in_parts: bool
    cited: list[bool]  # by answerable part: its document cited
    held: list[bool] | None  # by answerable part: its gold in the answer; None: one gives none
    held_alone: list[bool] | None  # the same, each in the part's own answer asked alone
    answered_anyway: int  # unanswerable parts not named "not found"
    comparison: bool | None  # right or wrong; None: no comparison stated
    reasons: list[str]


def _score(question: EvalQuestion, asked: PartsAsked) -> _Scored:
    answer, parts = asked.answer, question.parts or []
    answerable = [(i, p) for i, p in enumerate(parts) if p.answerable]
    cited = [any(source_matches(c.source_uri, p.expected_source or "") for c in answer.citations)
             for _, p in answerable]
    text = bare_text(answer.answer) if answer.found else ""
    gold = bool(answerable) and all(p.answer for _, p in answerable)
    held = [holds_answer(text, p.answer or "") for _, p in answerable] if gold else None
    held_alone = [asked.separate[i].found and holds_answer(bare_text(asked.separate[i].answer),
                                                           p.answer or "")
                  for i, p in answerable] if gold else None
    # The engine's parts are matched to the set's by position, when it split as the set does.
    own = answer.parts if len(answer.parts) == len(parts) else None
    anyway = [i for i, p in enumerate(parts) if not p.answerable and answer.found
              and (own is None or own[i].found or bool(own[i].citations))]
    compared = answer.comparison
    right = None if compared is None else comparison_right(compared.values, parts)
    reasons = [f"part {i + 1}: its document is not cited"
               for (i, _), ok in zip(answerable, cited, strict=True) if not ok]
    if held is not None:
        reasons += [f"part {i + 1}: its gold answer is not in the answer"
                    for (i, _), ok in zip(answerable, held, strict=True) if not ok]
    reasons += [f"part {i + 1}: answered, though no document the caller may read answers it"
                for i in anyway]
    if compared is not None and not right:
        reasons.append(f"wrong comparison: {compared.text}")
    return _Scored(bool(answer.parts), cited, held, held_alone, len(anyway), right, reasons)


def _headline(scored: Sequence[_Scored]) -> FormMetrics:
    with_answerable = [s.cited for s in scored if s.cited]
    gold = [s for s in scored if s.held is not None]
    return FormMetrics(
        n=len(scored),
        answered_in_parts_rate=rate(sum(s.in_parts for s in scored), len(scored)),
        all_cited_rate=rate(sum(all(c) for c in with_answerable), len(with_answerable)),
        all_held_rate=rate(sum(all(s.held or []) for s in gold), len(gold)),
        separate_all_held_rate=rate(sum(all(s.held_alone or []) for s in gold), len(gold)),
    )


def evaluate_parts(questions: Sequence[EvalQuestion], asked: Sequence[PartsAsked],
                   singles: Sequence[AskResult] = ()) -> PartsMetrics:
    """The measures of multi-part `questions`; asked[i] is how questions[i] was answered, and
    `singles` the answers to the set's single questions (for single_in_parts_rate).

    A question's document and gold checks count only its answerable parts; latencies are
    nearest-rank quantiles of the milliseconds measured around each ask.
    """
    _check_aligned(questions, asked)
    scored = [_score(q, a) for q, a in zip(questions, asked, strict=True)]
    parts = [p for q in questions for p in q.parts or []]
    cited = [ok for s in scored for ok in s.cited]
    gold = [s for s in scored if s.held is not None]
    blocks = sorted(len(b) for a in asked for b in part_blocks(a.answer.answer))
    alone = sorted(len(bare_text(s.answer)) for a in asked for s in a.separate if s.found)
    took = sorted(a.took_ms for a in asked)
    took_alone = sorted(ms for a in asked for ms in a.separate_ms)
    compared = [s.comparison for s in scored if s.comparison is not None]
    forms: dict[str, list[_Scored]] = {}
    for question, verdicts in zip(questions, scored, strict=True):
        if question.form:
            forms.setdefault(question.form, []).append(verdicts)
    return PartsMetrics(
        **msgspec.structs.asdict(_headline(scored)),
        parts=len(parts),
        part_cited_rate=rate(sum(cited), len(cited)),
        gold=len(gold),
        held_ratio=rate(sum(all(s.held or []) for s in gold),
                        sum(all(s.held_alone or []) for s in gold)),
        unanswerable_parts=sum(1 for p in parts if not p.answerable),
        unanswerable_answered=sum(s.answered_anyway for s in scored),
        comparisons_stated=len(compared),
        comparisons_right=sum(compared),
        comparisons_wrong=len(compared) - sum(compared),
        part_chars_median=quantile(blocks, 0.5),
        part_chars_p90=quantile(blocks, 0.9),
        separate_chars_median=quantile(alone, 0.5),
        separate_chars_p90=quantile(alone, 0.9),
        latency_ms_median=quantile(took, 0.5),
        latency_ms_p95=quantile(took, 0.95),
        separate_latency_ms_median=quantile(took_alone, 0.5),
        separate_latency_ms_p95=quantile(took_alone, 0.95),
        single_questions=len(singles),
        single_in_parts_rate=rate(sum(1 for a in singles if a.parts), len(singles)),
        wrong=[WrongParts(question=q.question, answer=a.answer.answer[:120], reasons=s.reasons)
               for q, a, s in zip(questions, asked, scored, strict=True) if s.reasons],
        by_form={form: _headline(group) for form, group in sorted(forms.items())} if forms
        else UNSET,
    )


def _check_aligned(questions: Sequence[EvalQuestion], asked: Sequence[PartsAsked]) -> None:
    if len(asked) != len(questions):
        raise ValueError(f"{len(asked)} answers for {len(questions)} multi-part questions")
    for question, answers in zip(questions, asked, strict=True):
        if len(answers.separate) != len(question.parts or []):
            raise ValueError(f"{len(answers.separate)} parts asked alone for the "
                             f"{len(question.parts or [])} of {question.question!r}")
