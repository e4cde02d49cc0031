"""retrieval_evaluation: the configured question sets replayed against the live index after
every index change and nightly (sensors.py), with a blocking Recall@5 check and answer-quality
warnings (checks.py). The measuring itself knows nothing of Dagster
(kb_pipeline/index_evaluation.py), so a rebuilt index generation is measured the same way
before it is published.
"""

import time
from datetime import UTC, datetime

import dagster as dg

from kb_eval.report.metadata import metric_values, metrics_markdown, misses_markdown
from kb_eval.report.plots import recall_svg, svg_data_uri
from kb_pipeline.defs.evaluation.checks import CHECK_SPECS, answer_checks, recall_check
from kb_pipeline.defs.evaluation.sensors import EVALUATION_AUTOMATION
from kb_pipeline.defs.ingestion.assets import search_index
from kb_pipeline.defs.resources import (
    AnswererResource,
    EmbedderResource,
    EngineResource,
    EvaluationResource,
    PostgresResource,
    RerankerResource,
)
from kb_pipeline.index_evaluation import evaluate_index, question_sets

__all__ = ["retrieval_evaluation"]


@dg.asset(
    deps=[search_index, "published_generation"],  # a published rebuild changes the index too
    kinds={"python", "postgres"},
    group_name="evaluation",
    check_specs=CHECK_SPECS,
    automation_condition=EVALUATION_AUTOMATION,
)
def retrieval_evaluation(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
    answerer: AnswererResource, reranker: RerankerResource, engine: EngineResource,
    evaluation: EvaluationResource,
) -> dg.MaterializeResult:
    """How well employees find and get answers today: the question sets (KB_EVAL_SETS) replayed
    against the live index with the real search and answerer. Recall@1/5/10, MRR@10 and
    nDCG@10 per search mode; cited-expected, "not found" precision and recall, and
    numbers-match rates of the answers; how multi-part questions are answered part by part, and
    how the last turn of a conversation is answered as a follow-up beside its standalone form
    and its own words asked alone (both reported, never checked). Its numbers are plotted over
    materializations."""
    configured = engine.settings(postgres, embedder, reranker, answerer, evaluation)
    settings = configured.evaluation
    started = time.perf_counter()
    report = evaluate_index(configured)
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
        "question_sets": ", ".join(str(p) for p in question_sets(settings)),
        "evaluated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "elapsed_s": elapsed,
        **metric_values(report),
    }
    return dg.MaterializeResult(
        metadata=metadata,
        check_results=[recall_check(report, settings), *answer_checks(report, settings)],
    )
