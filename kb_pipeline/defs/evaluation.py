"""retrieval_evaluation: the configured question sets replayed against the live index after
every index change and nightly, with a blocking Recall@5 check and answer-quality warnings.

`evaluate_index` measures one database connection and knows nothing of Dagster, so a rebuilt
index generation can be measured the same way before it is published.
"""

import dataclasses
import time
from datetime import UTC, datetime

import dagster as dg
import psycopg

from kb_core.index_model import check_index_model
from kb_core.settings import EvalSettings, Settings
from kb_pipeline.defs.ingestion import search_index
from kb_pipeline.defs.resources import (
    AnswererResource,
    EmbedderResource,
    PostgresResource,
    RerankerResource,
)
from kb_search.answerers.judge import make_judge
from kb_search.engine import build_engine, build_searcher
from kb_search.evaluation import EvalReport, load_question_sets, run_question_set
from kb_search.report import (
    metric_values,
    metrics_markdown,
    misses_markdown,
    recall_svg,
    svg_data_uri,
)
from kb_search.search import configure_search_session

__all__ = [
    "EVALUATION_AUTOMATION",
    "EVALUATION_SENSOR",
    "NIGHTLY_CRON",
    "RECALL_CHECK",
    "evaluate_index",
    "evaluation_settings",
    "retrieval_evaluation",
]

NIGHTLY_CRON = "0 3 * * *"  # 03:00 UTC (12:00 JST), away from office-hours ingestion
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

# After any document of the index changed (once the ingestion run is over), and nightly even
# when nothing changed: the nightly run catches drift from outside the index (synonyms,
# thresholds, a new question set).
EVALUATION_AUTOMATION = (
    (
        dg.AutomationCondition.newly_missing()
        | dg.AutomationCondition.any_deps_updated()
        | dg.AutomationCondition.cron_tick_passed(NIGHTLY_CRON)
    ).since_last_handled()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
).with_label(f"after an index change, and nightly ({NIGHTLY_CRON} UTC)")

# Dagster's default automation sensor starts STOPPED; this one runs as soon as `kb up` starts
# the daemon, so the condition above is actually evaluated.
EVALUATION_SENSOR = dg.AutomationConditionSensorDefinition(
    "evaluation_automation",
    target=dg.AssetSelection.assets("retrieval_evaluation"),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=60,
)


def evaluation_settings(embedder: EmbedderResource, answerer: AnswererResource,
                        reranker: RerankerResource) -> Settings:
    """The configuration read as this run starts (question sets, floors, synonyms), with the
    engine's parts as the run's resources give them."""
    return dataclasses.replace(Settings.from_env(), embedder=embedder.settings(),
                               answerer=answerer.settings(), reranker=reranker.settings())


def evaluate_index(conn: psycopg.Connection, settings: Settings, *,
                   answers: bool = True) -> EvalReport:
    """The `run_question_set` report of the configured question sets on `conn` (an autocommit
    connection to one index), with the engine `kb search` and `kb ask` build; an LLM answerer
    also judges the answers' faithfulness (model-judged, never a check). Raises
    IndexModelMismatchError when the index was built with another embedding model."""
    questions = load_question_sets(settings.evaluation.sets)
    engine = build_engine(settings) if answers else None
    searcher = engine.searcher if engine else build_searcher(settings)
    check_index_model(conn, searcher.embedder_for(searcher.configured))
    configure_search_session(conn)
    searcher.follow(conn)
    return run_question_set(conn, questions, searcher, engine,
                            groups=settings.evaluation.groups,
                            judge=make_judge(settings.answerer) if answers else None)


def _recall_check(report: EvalReport, settings: EvalSettings) -> dg.AssetCheckResult:
    hybrid = report.modes["hybrid"]
    recall = hybrid.recall.at_5
    return dg.AssetCheckResult(
        check_name=RECALL_CHECK,
        passed=recall >= settings.min_recall_at_5,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"hybrid_recall_at_5": recall, "floor": settings.min_recall_at_5,
                  "questions": hybrid.n},
    )


def _answer_checks(report: EvalReport, settings: EvalSettings) -> list[dg.AssetCheckResult]:
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


_CHECK_SPECS = [
    dg.AssetCheckSpec(RECALL_CHECK, asset="retrieval_evaluation", blocking=True,
                      description="Hybrid Recall@5 is at or above KB_EVAL_MIN_RECALL5."),
    *(dg.AssetCheckSpec(name, asset="retrieval_evaluation", description=text)
      for name, (_, _, text) in _ANSWER_CHECKS.items()),
    dg.AssetCheckSpec(_FORBIDDEN_CHECK, asset="retrieval_evaluation",
                      description="No answer cites a document outside the question's groups."),
]


@dg.asset(
    deps=[search_index, "published_generation"],  # a published rebuild changes the index too
    kinds={"python", "postgres"},
    group_name="evaluation",
    check_specs=_CHECK_SPECS,
    automation_condition=EVALUATION_AUTOMATION,
)
def retrieval_evaluation(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
    answerer: AnswererResource, reranker: RerankerResource,
) -> dg.MaterializeResult:
    """How well employees find and get answers today: the question sets (KB_EVAL_SETS) replayed
    against the live index with the real search and answerer. Recall@1/5/10, MRR@10 and
    nDCG@10 per search mode; cited-expected, "not found" precision and recall, and
    numbers-match rates of the answers. Its numbers are plotted over materializations."""
    engine = evaluation_settings(embedder, answerer, reranker)
    settings = engine.evaluation
    started = time.perf_counter()
    with postgres.connection() as conn:
        report = evaluate_index(conn, engine)
    elapsed = round(time.perf_counter() - started, 1)
    context.log.info("evaluated %d questions in %.1f s", report.questions, elapsed)
    plot = recall_svg(report.curves)
    curve_rows = [
        dg.TableRecord({"k": k, **{mode: curve[k - 1] for mode, curve in report.curves.items()}})
        for k in range(1, len(report.curves["hybrid"]) + 1)
    ]
    metadata = {
        "report": dg.MetadataValue.md(
            metrics_markdown(report)
            + f"\n\n### Recall@k against k\n\n![Recall@k against k]({svg_data_uri(plot)})"
        ),
        "misses": dg.MetadataValue.md(misses_markdown(report)),
        "recall_at_k": dg.MetadataValue.table(
            curve_rows,
            schema=dg.TableSchema(columns=[
                dg.TableColumn("k", "int"),
                *(dg.TableColumn(mode, "float") for mode in report.curves),
            ]),
        ),
        "questions": report.questions,
        "question_sets": ", ".join(str(p) for p in settings.sets),
        "evaluated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "elapsed_s": elapsed,
        **metric_values(report),
    }
    return dg.MaterializeResult(
        metadata=metadata,
        check_results=[_recall_check(report, settings), *_answer_checks(report, settings)],
    )
