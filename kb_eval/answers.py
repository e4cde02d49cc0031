"""Answer metrics: pure functions over the `kb ask` result of each question of a set, with the
checks each answer is held to (cites the expected document, says "not found" where the set
expects it, every number in a cited passage, citations numbered as read, quotes that hold what
the answer took from them, no citation outside the question's groups).

The results are structs that encode to the JSON `kb eval --json` prints: field order is key
order, and the judge's fields are left out (not null) when no judge ran.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import msgspec
from msgspec import UNSET, UnsetType

from kb_eval.question_sets import EvalQuestion, holds_answer, source_matches, squeezed
from kb_eval.rounded import quantile, rate
from kb_eval.table_figures import TableFigures, table_figures
from kb_search import AskResult
from kb_search.answerers.answer import citations, claims

__all__ = [
    "AnswerMetrics",
    "NotFoundByMiss",
    "WrongAnswer",
    "bare_text",
    "evaluate_answers",
    "numbered_in_order",
    "numbers_match",
    "quotes_hold",
]

# The wording of kb_search/answerers/verification.py for a number or code of an answer that
# no passage it cites contains (tests/unit/test_evaluation.py holds the two together).
_UNSUPPORTED = ("number ", "code ")


class WrongAnswer(msgspec.Struct):
    """An answer that failed a measure, with the reasons and the documents it cites."""

    question: str
    expected_source: str | None
    answerable: bool
    answer: str  # its first 120 characters
    reasons: list[str]
    cited: list[str]


class NotFoundByMiss(msgspec.Struct):
    """"Not found" on the unanswerable questions of one kind ("near" or "far"): recall over
    them, and precision as if the set held only them and the answerable questions."""

    unanswerable: int
    not_found_precision: float
    not_found_recall: float


class AnswerMetrics(msgspec.Struct):
    """The answer measures (`evaluate_answers`); the judge's fields only when a judge ran."""

    answerable: int
    unanswerable: int
    found: int
    cited_expected_rate: float
    not_found_precision: float
    not_found_recall: float
    answerable_not_found_rate: float  # what KB_MAX_FALSE_NOT_FOUND bounds, end to end
    numbers_match_rate: float
    verified_rate: float
    # Found answers whose [n] run 1, 2, ... in order of first appearance and whose citations
    # are exactly those, in that order.
    citations_in_order_rate: float
    forbidden_citations: int | None  # None when not measured
    wrong: list[WrongAnswer]
    judge: str | UnsetType = UNSET
    judged: int | UnsetType = UNSET
    judged_faithfulness: float | None | UnsetType = UNSET
    # Where the set gives gold answers: the share of answerable questions whose answer contains
    # its gold span, and the length of the answers' text without their [n] markers.
    gold_in_answer_rate: float | UnsetType = UNSET
    answer_chars_median: float | UnsetType = UNSET
    answer_chars_p90: float | UnsetType = UNSET
    # The citations of extractive answers whose quote holds every sentence the answer took from
    # that passage (`quotes_hold`); only where the extractive answerer answered.
    quotes_hold_answer_rate: float | UnsetType = UNSET
    # Where the set says of its unanswerable questions how near the documents come ("miss").
    by_miss: dict[str, NotFoundByMiss] | UnsetType = UNSET
    # Where the set has table questions: per kind (cell, extreme, count, comparison, all).
    by_table: dict[str, TableFigures] | UnsetType = UNSET

    def faithfulness(self) -> float | None:
        """The model-judged faithfulness; None when no judge ran or it scored no answer."""
        return None if isinstance(self.judged_faithfulness, UnsetType) else self.judged_faithfulness


def numbers_match(answer: AskResult) -> bool:
    """Whether every number and code of an answer appears in a passage it cites, as the
    answer's verification found (its warnings)."""
    return not any(w.startswith(_UNSUPPORTED) for w in answer.warnings)


def numbered_in_order(answer: AskResult) -> bool:
    """Whether the answer's [n] run 1, 2, ... in the order it first cites them, and its
    citations are those numbers, in that order."""
    expected = list(range(1, len(answer.citations) + 1))
    return citations(answer.answer) == expected and [c.n for c in answer.citations] == expected


def quotes_hold(answer: AskResult) -> list[bool]:
    """For each citation, whether its quote holds every piece of the answer that cites it,
    line by line (a table row is quoted under its header, "…" between them), NFKC, white
    space removed. For the extractive answerer, whose pieces are the sentences it quoted."""
    said = claims(answer.answer)
    return [all(_holds_lines(c.quote, claim.text) for claim in said if c.n in claim.cites)
            for c in answer.citations]


def _holds_lines(quote: str, said: str) -> bool:
    held = squeezed(quote)
    return all(squeezed(line) in held for line in said.splitlines() if line.strip())


def evaluate_answers(
    questions: list[EvalQuestion],
    answers: list[AskResult],
    *,
    default_groups: Sequence[str] = (),
    document_groups: Mapping[str, Sequence[str]] | None = None,
) -> AnswerMetrics:
    """Answer quality; `answers[i]` is the `kb ask` result for questions[i].

    - cited_expected_rate: answerable questions answered citing the expected document and no
      document outside the question's groups;
    - not_found_precision / not_found_recall: of "not found" on the unanswerable questions;
      answerable_not_found_rate: answerable questions answered "not found"; by_miss: the first
      two for each kind of unanswerable question the set tags ("miss": "near" or "far"), the
      precision counting that kind's refusals against the answerable questions';
    - numbers_match_rate: found answers whose every number and code appears in a passage they
      cite; verified_rate: answers whose verification raised no warning at all;
    - citations_in_order_rate: found answers numbered as read (`numbered_in_order`);
      quotes_hold_answer_rate: the extractive answers' citations whose quote holds what the
      answer took from the passage (`quotes_hold`);
    - forbidden_citations: answers citing a document the question's groups (its own "groups",
      else `default_groups`) may not see, by `document_groups` (source_uri → allowed groups; a
      document missing from it counts as forbidden). Not measured when it is None.
    `wrong` lists every failed answer with its reasons.
    """
    if len(answers) != len(questions):
        raise ValueError(f"{len(answers)} answers for {len(questions)} questions")
    failures = [_answer_failures(q, a, default_groups, document_groups)
                for q, a in zip(questions, answers, strict=True)]
    answerable = [f for q, f in zip(questions, failures, strict=True) if q.answerable]
    unanswerable = sum(1 for q in questions if not q.answerable)
    said_not_found = [q for q, a in zip(questions, answers, strict=True) if not a.found]
    true_not_found = sum(1 for q in said_not_found if not q.answerable)
    found = [a for a in answers if a.found]
    gold = [(q, a) for q, a in zip(questions, answers, strict=True) if q.answerable and q.answer]
    bodies = sorted(len(bare_text(a.answer)) for a in found)
    held = [ok for a in found if a.answerer.startswith("extractive") for ok in quotes_hold(a)]
    return AnswerMetrics(
        answerable=len(answerable),
        unanswerable=unanswerable,
        found=len(found),
        cited_expected_rate=rate(
            sum(1 for f in answerable if not set(f) & _NOT_CITED_EXPECTED), len(answerable)),
        not_found_precision=rate(true_not_found, len(said_not_found)),
        not_found_recall=rate(true_not_found, unanswerable),
        answerable_not_found_rate=rate(len(said_not_found) - true_not_found, len(answerable)),
        numbers_match_rate=rate(sum(1 for a in found if numbers_match(a)), len(found)),
        verified_rate=rate(sum(1 for a in answers if a.verified), len(answers)),
        citations_in_order_rate=rate(sum(1 for a in found if numbered_in_order(a)), len(found)),
        forbidden_citations=(
            None if document_groups is None
            else sum(1 for f in failures if "cites a forbidden document" in f)
        ),
        wrong=[
            WrongAnswer(question=q.question, expected_source=q.expected_source,
                        answerable=q.answerable, answer=a.answer[:120], reasons=f,
                        cited=[c.source_uri for c in a.citations])
            for q, a, f in zip(questions, answers, failures, strict=True) if f
        ],
        **({"gold_in_answer_rate": rate(sum(1 for q, a in gold if a.found and holds_answer(
                bare_text(a.answer), q.answer or "")), len(gold)),
            "answer_chars_median": quantile(bodies, 0.5),
            "answer_chars_p90": quantile(bodies, 0.9)} if gold else {}),
        **({"quotes_hold_answer_rate": rate(sum(held), len(held))} if held else {}),
        **({"by_miss": by_miss} if (by_miss := _by_miss(questions, answers)) else {}),
        **({"by_table": table_figures(questions, answers)}
           if any(q.table for q in questions) else {}),
    )


def _by_miss(questions: list[EvalQuestion], answers: list[AskResult]
             ) -> dict[str, NotFoundByMiss]:
    """The not-found figures of each kind of unanswerable question the set tags."""
    refused_answerable = sum(1 for q, a in zip(questions, answers, strict=True)
                             if q.answerable and not a.found)
    figures = {}
    for kind in sorted({q.miss for q in questions if q.miss}):
        said = [not a.found for q, a in zip(questions, answers, strict=True) if q.miss == kind]
        figures[kind] = NotFoundByMiss(
            unanswerable=len(said),
            not_found_precision=rate(sum(said), sum(said) + refused_answerable),
            not_found_recall=rate(sum(said), len(said)))
    return figures


_CITATION = re.compile(r"\[\d+\]")


def bare_text(answer: str) -> str:
    """An answer's text without its [n] marks: what gold spans and lengths are measured on."""
    return _CITATION.sub("", answer)


_NOT_CITED_EXPECTED = {"said not found", "does not cite the expected document",
                       "cites a forbidden document"}


def _answer_failures(question: EvalQuestion, answer: AskResult, default_groups: Sequence[str],
                     document_groups: Mapping[str, Sequence[str]] | None) -> list[str]:
    reasons = []
    cited = [c.source_uri for c in answer.citations]
    if question.answerable and not answer.found:
        reasons.append("said not found")
    elif question.answerable and not any(
            source_matches(uri, question.expected_source or "") for uri in cited):
        reasons.append("does not cite the expected document")
    if not question.answerable and answer.found:
        reasons.append("missed not found")
    if answer.found and not numbers_match(answer):
        reasons.append("a number or code is in no cited passage")
    if document_groups is not None:
        groups = set(question.groups if question.groups is not None else default_groups)
        if any(not groups & set(document_groups.get(uri, ())) for uri in cited):
            reasons.append("cites a forbidden document")
    return reasons
