# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""Gated rebuilds: a pipeline change (parser, chunker, keywords or embedding model version)
rebuilds every document into a new index generation beside the live one; it is evaluated and
published only when its gate passes.

The folder sensor calls `rebuild_requests` (sensors.py) on each tick: it creates the generation
and builds it in rounds of ingest runs tagged with it, each round over the catalogued files the
generation does not hold yet (all of them at first; then files added or edited meanwhile). When
a round leaves nothing to do, it launches `evaluate_generation` (jobs.py) for it. There, these
assets run: `generation_search_indexes` builds the generation's search indexes once over all its
rows (its documents were written without them), `generation_evaluation` replays the question
sets against the candidate and the live generation side by side; its blocking checks keep
`published_generation`, which switches the live index in one transaction, from running unless
the candidate is as good. `kb generation rebuild` does the same in one process
(kb_pipeline/in_process.py).
"""


import dagster as dg

from kb_core.generations import (
    build_search_indexes,
    generation,
    missing_from,
    publish_generation,
    record_evaluation,
    set_state,
)
from kb_core.index_model import IndexModelMismatchError
from kb_core.learned_facts import index_learned_facts
from kb_eval.report.metadata import metrics_markdown, misses_markdown
from kb_pipeline.defs.resources import (
    AnswererResource,
    EmbedderResource,
    EngineResource,
    EvaluationResource,
    GraphLlmResource,
    PostgresResource,
    RerankerResource,
    facts_embedder_for,
    running_version,
)
from kb_pipeline.index_evaluation import evaluate_index
from kb_pipeline.integrity import integrity_violations, violations_markdown
from kb_pipeline.rebuilds import current_access
from kb_pipeline.runs import GENERATIONS_PARTITIONS

__all__ = [
    "COVERAGE_GATE",
    "RECALL_GATE",
    "SOUND_GATE",
    "generation_evaluation",
    "generation_search_indexes",
    "published_generation",
]

RECALL_GATE = "generation_recall_at_5_holds"
COVERAGE_GATE = "generation_covers_live_documents"
SOUND_GATE = "generation_index_is_sound"
_GENERATIONS = {"partitions_def": GENERATIONS_PARTITIONS, "group_name": "generations"}


@dg.asset(
    kinds={"postgres", "pgvector"},
    check_specs=[dg.AssetCheckSpec(
        SOUND_GATE, asset="generation_search_indexes", blocking=True,
        description="The whole rebuilt generation passes search_index's integrity checks, "
                    "which its build runs applied to the documents each wrote.")],
    **_GENERATIONS,
)
def generation_search_indexes(
    context: dg.AssetExecutionContext, postgres: PostgresResource
) -> dg.MaterializeResult:
    """A rebuilt generation's search indexes (the HNSW graph of its embedding views, the GIN
    indexes of its keywords and groups), built once over all its rows after its last build
    round, with the memory a graph of its size needs; then its tables vacuumed and analyzed,
    and the whole generation checked for integrity. Nothing is built again for a generation
    that has them."""
    gen_id = int(context.partition_key)
    with postgres.connection() as conn:
        seconds = build_search_indexes(conn, gen_id)
    with postgres.connection(gen_id) as conn:
        violations = integrity_violations(conn)
    found = {name: len(rows) for name, rows in violations.items() if rows}
    if found:  # refused here: its evaluation does not run
        with postgres.connection() as conn:
            record_evaluation(conn, gen_id, False, found, "integrity: " + "; ".join(
                f"{name} {count}" for name, count in found.items()))
    return dg.MaterializeResult(
        metadata={"generation": gen_id, "indexes_built": len(seconds) - 1,
                  **{f"{name}_s": value for name, value in seconds.items()}},
        check_results=[dg.AssetCheckResult(
            check_name=SOUND_GATE,
            passed=not found,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={name: dg.MetadataValue.md(violations_markdown(name, rows))
                      for name, rows in violations.items()},
        )],
    )


@dg.asset(
    kinds={"python", "postgres"},
    deps=[generation_search_indexes],
    check_specs=[
        dg.AssetCheckSpec(
            RECALL_GATE, asset="generation_evaluation", blocking=True,
            description="The rebuilt generation's hybrid Recall@5 is at or above "
                        "KB_EVAL_MIN_RECALL5 and at most KB_EVAL_MAX_RECALL5_DROP below the "
                        "live generation's, measured in the same run."),
        dg.AssetCheckSpec(
            COVERAGE_GATE, asset="generation_evaluation", blocking=True,
            description="Every document the live generation serves is in the rebuilt one."),
    ],
    **_GENERATIONS,
)
def generation_evaluation(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
    answerer: AnswererResource, reranker: RerankerResource, engine: EngineResource,
    evaluation: EvaluationResource,
) -> dg.MaterializeResult:
    """A rebuilt index generation (the partition) measured against the live one with the
    configured question sets: it may be published only when both gates pass. A failed
    generation stays unpublished, with these figures, until it is discarded
    (`kb generation discard N`)."""
    gen_id = int(context.partition_key)
    configured = engine.settings(postgres, embedder, reranker, answerer, evaluation)
    settings = configured.evaluation
    with postgres.connection() as conn:
        state = generation(conn, gen_id).state
        if state not in ("building", "evaluating", "passed", "failed"):
            # A failed generation may be evaluated again (from the UI); a discarded one is
            # empty, and the live one has nothing to be compared with.
            raise dg.Failure(f"generation {gen_id} is {state}: nothing to evaluate")
        set_state(conn, gen_id, "evaluating")
        missing = missing_from(conn, gen_id)
        try:
            live = evaluate_index(configured, answers=False)
        except IndexModelMismatchError as exc:  # a new embedding model: only the floor applies
            context.log.warning("live generation not comparable: %s", exc)
            live = None
    with postgres.connection(gen_id) as conn:
        # Approved corrections, embedded with the candidate's own model, are measured with it.
        index_learned_facts(conn, facts_embedder_for(embedder))
        report = evaluate_index(configured, generation=gen_id)
    recall = report.modes["hybrid"].recall.at_5
    live_recall = live.modes["hybrid"].recall.at_5 if live is not None else None
    reasons = []
    if recall < settings.min_recall_at_5:
        reasons.append(f"hybrid Recall@5 {recall:.4f} is under the floor "
                       f"{settings.min_recall_at_5:.4f}")
    if live_recall is not None and recall < live_recall - settings.max_recall_drop:
        reasons.append(f"hybrid Recall@5 {recall:.4f} is more than "
                       f"{settings.max_recall_drop:.4f} below the live generation's "
                       f"{live_recall:.4f}")
    if missing:
        reasons.append(f"{len(missing)} documents of the live generation are missing")
    figures = {"hybrid_recall_at_5": recall, "live_hybrid_recall_at_5": live_recall,
               "floor": settings.min_recall_at_5, "max_drop": settings.max_recall_drop,
               "missing_documents": len(missing)}
    with postgres.connection() as conn:
        record_evaluation(conn, gen_id, not reasons, figures, "; ".join(reasons) or None)
    comparison = (
        "| | hybrid Recall@5 |\n| --- | --- |\n"
        f"| generation {gen_id} (rebuilt) | {recall:.4f} |\n"
        + (f"| live generation | {live_recall:.4f} |\n" if live_recall is not None else "")
    )
    return dg.MaterializeResult(
        metadata={
            "generation": gen_id,
            "verdict": "passed: publishing" if not reasons else "; ".join(reasons),
            "comparison": dg.MetadataValue.md(comparison),
            "report": dg.MetadataValue.md(metrics_markdown(report)),
            "misses": dg.MetadataValue.md(misses_markdown(report)),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=RECALL_GATE,
                passed=not [r for r in reasons if "Recall@5" in r],
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={k: v for k, v in figures.items() if v is not None},
            ),
            dg.AssetCheckResult(
                check_name=COVERAGE_GATE,
                passed=not missing,
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={"missing_documents": len(missing), "paths": dg.MetadataValue.md(
                    "\n".join(f"- {p}" for p in missing[:50]) or "none")},
            ),
        ],
    )


@dg.asset(kinds={"postgres"}, deps=[generation_evaluation], **_GENERATIONS)
def published_generation(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
    graph_llm: GraphLlmResource,
) -> dg.MaterializeResult:
    """The rebuilt generation made live in one transaction: every search before it reads the
    old generation whole, every search after it the new one. The generation it replaces is
    dropped."""
    gen_id = int(context.partition_key)
    with postgres.connection(gen_id) as conn:
        # Corrections decided since the evaluation: embedding takes no lock the switch needs.
        index_learned_facts(conn, facts_embedder_for(embedder))
    with postgres.connection() as conn:
        version = running_version(embedder, graph_llm)
        retired = publish_generation(conn, gen_id, version, current_access(conn))
    return dg.MaterializeResult(metadata={"generation": gen_id, "retired_generation": retired})
