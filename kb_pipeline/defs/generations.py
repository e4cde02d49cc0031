# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""Gated rebuilds: a pipeline change (parser, chunker, keywords or embedding model version)
rebuilds every document into a new index generation beside the live one; it is evaluated and
published only when its gate passes.

The folder sensor calls `rebuild_requests` on each tick: it creates the generation and builds
it in rounds of ingest runs tagged with it, each round over the catalogued files the generation
does not hold yet (all of them at first; then files added or edited meanwhile). When a round
leaves nothing to do, it launches `evaluate_generation` for it. There,
`generation_search_indexes` builds the generation's search indexes once over all its rows
(its documents were written without them), `generation_evaluation`
replays the question sets against the candidate and the live generation side by side; its
blocking checks keep `published_generation`, which switches the live index in one transaction,
from running unless the candidate is as good. `kb generation rebuild` does the same in one
process (kb_pipeline/in_process.py).
"""


import dagster as dg
import psycopg

from kb_core.generations import (
    Access,
    Generation,
    build_search_indexes,
    create_generation,
    discard_generation,
    generation,
    is_claimed,
    list_generations,
    mark_round_launched,
    missing_from,
    on_generation,
    publish_generation,
    rebuild_needed,
    record_evaluation,
    set_state,
)
from kb_core.index_model import IndexModelMismatchError
from kb_core.settings import Settings
from kb_pipeline.access import AccessError
from kb_pipeline.catalogue import stale_documents
from kb_pipeline.defs.checks import integrity_violations, violations_markdown
from kb_pipeline.defs.evaluation import evaluate_index, evaluation_settings
from kb_pipeline.defs.ingestion import INGEST_JOB, raw_config
from kb_pipeline.defs.learned_facts import facts_embedder_for
from kb_pipeline.defs.resources import (
    AnswererResource,
    EmbedderResource,
    PostgresResource,
    RerankerResource,
)
from kb_pipeline.runs import (
    GENERATION_TAG,
    MAX_REBUILT_PER_RUN,
    UNFINISHED,
    partition_ranges,
    range_tags,
)
from kb_pipeline.stages import access_now, pipeline_version
from kb_search.learned_facts import index_learned_facts
from kb_search.report import metrics_markdown, misses_markdown

__all__ = [
    "GATE_JOB",
    "GENERATIONS_PARTITIONS",
    "discard_generation_job",
    "generation_evaluation",
    "generation_running",
    "generation_search_indexes",
    "published_generation",
    "rebuild_requests",
    "rebuild_tags",
    "stale_keys",
]

GENERATIONS_PARTITIONS = dg.DynamicPartitionsDefinition(name="generations")
RECALL_GATE = "generation_recall_at_5_holds"
COVERAGE_GATE = "generation_covers_live_documents"
SOUND_GATE = "generation_index_is_sound"
_GENERATIONS = {"partitions_def": GENERATIONS_PARTITIONS, "group_name": "generations"}
# Rounds of rebuild runs before a generation is evaluated as it stands: files that keep
# changing, or keep failing without a checksum to recognise them by, must not keep it building.
MAX_BUILD_ROUNDS = 3


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
            metadata={name: violations_markdown(name, rows)
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
    answerer: AnswererResource, reranker: RerankerResource,
) -> dg.MaterializeResult:
    """A rebuilt index generation (the partition) measured against the live one with the
    configured question sets: it may be published only when both gates pass. A failed
    generation stays unpublished, with these figures, until it is discarded
    (`kb generation discard N`)."""
    gen_id = int(context.partition_key)
    engine = evaluation_settings(embedder, answerer, reranker)
    settings = engine.evaluation
    with postgres.connection() as conn:
        state = generation(conn, gen_id).state
        if state not in ("building", "evaluating", "passed", "failed"):
            # A failed generation may be evaluated again (from the UI); a discarded one is
            # empty, and the live one has nothing to be compared with.
            raise dg.Failure(f"generation {gen_id} is {state}: nothing to evaluate")
        set_state(conn, gen_id, "evaluating")
        missing = missing_from(conn, gen_id)
        try:
            live = evaluate_index(conn, engine, answers=False)
        except IndexModelMismatchError as exc:  # a new embedding model: only the floor applies
            context.log.warning("live generation not comparable: %s", exc)
            live = None
    with postgres.connection(gen_id) as conn:
        # Approved corrections, embedded with the candidate's own model, are measured with it.
        index_learned_facts(conn, facts_embedder_for(embedder))
        report = evaluate_index(conn, engine)
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
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """The rebuilt generation made live in one transaction: every search before it reads the
    old generation whole, every search after it the new one. The generation it replaces is
    dropped."""
    gen_id = int(context.partition_key)
    with postgres.connection(gen_id) as conn:
        # Corrections decided since the evaluation: embedding takes no lock the switch needs.
        index_learned_facts(conn, facts_embedder_for(embedder))
    with postgres.connection() as conn:
        retired = publish_generation(conn, gen_id, pipeline_version(embedder.get()),
                                     _current_access(conn))
    return dg.MaterializeResult(metadata={"generation": gen_id, "retired_generation": retired})


def _current_access(conn: psycopg.Connection) -> Access:
    def access(uri: str) -> tuple[list[str], str | None]:
        try:
            found = access_now(conn, uri)
        except (OSError, AccessError):  # an unreadable rule hides the document, never widens
            return [], None
        return ([], None) if found is None else (list(found.groups), found.rule)

    return access


GATE_JOB = dg.define_asset_job(
    "evaluate_generation",
    selection=dg.AssetSelection.groups("generations"),
    partitions_def=GENERATIONS_PARTITIONS,
    description="Evaluate a rebuilt index generation and publish it if its gates pass.",
)


class DiscardConfig(dg.Config):
    generation: int  # the id `kb generation list` and the generations partitions show


@dg.op
def discard_generation_op(
    context: dg.OpExecutionContext, config: DiscardConfig, postgres: PostgresResource
) -> None:
    """Drop a generation that is not live; its figures stay in `kb generation list`."""
    if generation_running(context.instance, config.generation):
        raise dg.Failure(f"generation {config.generation} is still being built or evaluated")
    with postgres.connection() as conn:
        discard_generation(conn, config.generation, "discarded from Dagster (discard_generation)")


@dg.job(name="discard_generation",
        description="Drop a refused (or unwanted) index generation, as `kb generation discard`.")
def discard_generation_job() -> None:
    discard_generation_op()


def rebuild_tags(gen_id: int, first: str, last: str) -> dict[str, str]:
    return {**range_tags(first, last), GENERATION_TAG: str(gen_id)}


def rebuild_requests(
    context: dg.SensorEvaluationContext, conn: psycopg.Connection, version: str,
    keys: list[str], settings: Settings,
) -> tuple[list[dg.RunRequest], list]:
    """The sensor's part in rebuilds: runs to request and generation partitions to add."""
    if keys and rebuild_needed(conn, version):
        gen = create_generation(conn, version)
        context.log.info("pipeline changed to %s: rebuilding into generation %d", version, gen.id)
    runs, partitions = [], []
    for gen in list_generations(conn):
        if gen.state not in ("building", "evaluating", "passed"):
            continue
        if generation_running(context.instance, gen.id) or is_claimed(conn, gen.id):
            continue
        if gen.pipeline_version != version:  # the pipeline changed again meanwhile
            discard_generation(conn, gen.id, f"superseded by pipeline {version}")
        elif gen.state == "building":
            stale = stale_keys(conn, gen, version, settings, keys)
            if stale:
                runs += [dg.RunRequest(job_name=INGEST_JOB.name, run_config=raw_config(settings),
                                       tags=rebuild_tags(gen.id, first, last))
                         for first, last in partition_ranges(keys, stale, MAX_REBUILT_PER_RUN)]
                mark_round_launched(conn, gen.id)
                continue
            set_state(conn, gen.id, "evaluating")
            partitions.append(GENERATIONS_PARTITIONS.build_add_request([str(gen.id)]))
            runs.append(dg.RunRequest(job_name=GATE_JOB.name, partition_key=str(gen.id),
                                      tags={GENERATION_TAG: str(gen.id)}))
        elif gen.state == "passed":  # its publication gave up (the index stayed busy): again
            runs.append(dg.RunRequest(
                job_name=GATE_JOB.name, partition_key=str(gen.id),
                asset_selection=[published_generation.key], tags={GENERATION_TAG: str(gen.id)}))
        else:  # its evaluation run ended without a verdict
            set_state(conn, gen.id, "failed",
                      f"the {GATE_JOB.name} run of generation {gen.id} ended without a verdict; "
                      "see that run in Dagster")
    return runs, partitions


def stale_keys(conn: psycopg.Connection, gen: Generation, version: str, settings: Settings,
           keys: list[str]) -> list[str]:
    """The documents partitions (of `keys`) the next build round of `gen` has to ingest:
    none once its rounds are used up."""
    if gen.build_rounds >= MAX_BUILD_ROUNDS:
        return []
    with on_generation(conn, gen.id):
        stale = stale_documents(conn, version, settings.max_file_bytes)
    known = set(keys)
    return [uri for uri in stale if uri in known]


def generation_running(instance: dg.DagsterInstance, gen_id: int) -> bool:
    """Whether a rebuild or evaluation run of generation `gen_id` is queued or running."""
    return bool(instance.get_run_ids(
        dg.RunsFilter(tags={GENERATION_TAG: str(gen_id)}, statuses=UNFINISHED), limit=1))

