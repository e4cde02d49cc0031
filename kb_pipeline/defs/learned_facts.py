# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""Learned facts in the Dagster UI: employees' corrections that reviewers approved, as the live
generation holds them, with the counts a data engineer wants to see. Approval (the page, `kb
corrections approve`) indexes a fact at once; this asset catches up a live generation that
lacks some (one published while a correction was approved) and records the counts whenever
corrections change. A rebuilt generation embeds its facts with its own model before it is
evaluated and again before it is published (kb_pipeline/defs/generations.py)."""


import dagster as dg

from kb_core.embeddings import embedder_for_index
from kb_core.generations import live_generation
from kb_core.queries import query
from kb_pipeline.defs.resources import EmbedderResource, PostgresResource
from kb_search.learned_facts import EmbedderFor, fact_counts, index_learned_facts

__all__ = ["LEARNED_FACTS_JOB", "facts_embedder_for", "learned_facts", "learned_facts_sensor"]


def facts_embedder_for(embedder: EmbedderResource) -> EmbedderFor:
    """The embedder of a generation's recorded model, with the configured providers."""
    settings = embedder.settings()
    return lambda model: embedder_for_index(model, settings)


@dg.asset(kinds={"python", "postgres"}, group_name="corrections")
def learned_facts(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """What the system learned from employees: corrections a reviewer approved, searched beside
    the documents and cited as 利用者による訂正（承認済み）, each only for the groups every
    document it corrects grants. Pending ones await review (`kb corrections list`); retired
    ones were approved until a document they correct changed."""
    with postgres.connection() as conn:
        added = index_learned_facts(conn, facts_embedder_for(embedder))
        counts = fact_counts(conn)
        generation = live_generation(conn).id
    if added:
        context.log.info("indexed %d learned facts missing from generation %d", added,
                         generation)
    return dg.MaterializeResult(metadata={
        "learned_facts": counts.facts, "visible_to_nobody": counts.visible_to_nobody,
        "pending_review": counts.pending, "approved": counts.approved,
        "rejected": counts.rejected, "retired_for_review": counts.retired,
        "indexed_now": added, "generation": generation,
    })


LEARNED_FACTS_JOB = dg.define_asset_job(
    "index_learned_facts", selection=[learned_facts],
    description="Index approved corrections the live generation lacks; count corrections.")


@dg.sensor(job=LEARNED_FACTS_JOB, minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING)
def learned_facts_sensor(
    context: dg.SensorEvaluationContext, postgres: PostgresResource
) -> dg.SensorResult:
    """A run of learned_facts whenever a correction is submitted or decided, or a generation
    is published."""
    with postgres.connection() as conn:
        changed = conn.execute(query("corrections_changed_at")).fetchone()[0]
        state = f"{live_generation(conn).id}:{changed}"
    if state == context.cursor:
        return dg.SensorResult(cursor=state)
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=state)], cursor=state)
