"""The checks retrieval_evaluation reports with each materialization: hybrid Recall@5 above its
floor (blocking, ERROR), and the answers' quality against theirs (WARN). Their specs, and their
results from an evaluation report."""

import dagster as dg

from kb_core.settings import EvalSettings
from kb_eval.run import EvalReport

__all__ = ["CHECK_SPECS", "RECALL_CHECK", "answer_checks", "recall_check"]

RECALL_CHECK = "hybrid_recall_at_5_above_floor"
_ANSWER_CHECKS = {
    # check name: (AnswerMetrics field, EvalSettings floor, what it states)
    "answers_cite_expected_source": (
        "cited_expected_rate", "min_cited_expected",
        "Answerable questions are answered citing the expected document."),
    "not_found_precision_above_floor": (
        "not_found_precision", "min_not_found_precision",
        'A "not found" answer is given to questions the documents cannot answer.'),
    "not_found_recall_above_floor": (
        "not_found_recall", "min_not_found_recall",
        'Questions the documents cannot answer get "not found".'),
    "answer_numbers_match_sources": (
        "numbers_match_rate", "min_numbers_match",
        "Every number and code of an answer appears in a passage it cites."),
}
_FORBIDDEN_CHECK = "answers_cite_only_permitted_documents"

CHECK_SPECS = [
    dg.AssetCheckSpec(RECALL_CHECK, asset="retrieval_evaluation", blocking=True,
                      description="Hybrid Recall@5 is at or above KB_EVAL_MIN_RECALL5."),
    *(dg.AssetCheckSpec(name, asset="retrieval_evaluation", description=text)
      for name, (_, _, text) in _ANSWER_CHECKS.items()),
    dg.AssetCheckSpec(_FORBIDDEN_CHECK, asset="retrieval_evaluation",
                      description="No answer cites a document outside the question's groups."),
]


def recall_check(report: EvalReport, settings: EvalSettings) -> dg.AssetCheckResult:
    """The blocking check: the report's hybrid Recall@5 against its floor."""
    hybrid = report.modes["hybrid"]
    recall = hybrid.recall.at_5
    return dg.AssetCheckResult(
        check_name=RECALL_CHECK,
        passed=recall >= settings.min_recall_at_5,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"hybrid_recall_at_5": recall, "floor": settings.min_recall_at_5,
                  "questions": hybrid.n},
    )


def answer_checks(report: EvalReport, settings: EvalSettings) -> list[dg.AssetCheckResult]:
    """The answer checks: each rate of the report's answers against its floor, and the answers
    that cite a document outside their question's groups."""
    answers = report.answers
    if answers is None:
        raise ValueError("the report holds no answers to check")
    results = []
    for name, (measure, floor_name, _) in _ANSWER_CHECKS.items():
        value = getattr(answers, measure)
        floor = getattr(settings, floor_name)
        results.append(dg.AssetCheckResult(
            check_name=name,
            passed=value >= floor,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={measure: value, "floor": floor, "answerable": answers.answerable,
                      "unanswerable": answers.unanswerable, "found": answers.found},
        ))
    forbidden = [w for w in answers.wrong if "cites a forbidden document" in w.reasons]
    results.append(dg.AssetCheckResult(
        check_name=_FORBIDDEN_CHECK,
        passed=answers.forbidden_citations == 0,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"forbidden_citations": answers.forbidden_citations,
                  "answers": dg.MetadataValue.md(
                      "\n".join(f"- {w.question}: {', '.join(w.cited)}"
                                for w in forbidden) or "none")},
    ))
    return results
