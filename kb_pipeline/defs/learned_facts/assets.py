# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""Learned facts in the Dagster UI: employees' corrections that reviewers approved, as the live
generation holds them, with the counts a data engineer wants to see. Approval (the page, `kb
corrections approve`) indexes a fact at once; this asset catches up a live generation that
lacks some (one published while a correction was approved) and records the counts whenever
corrections change (sensors.py). A rebuilt generation embeds its facts with its own model before
it is evaluated and again before it is published (kb_pipeline/defs/generations/assets.py)."""


import dagster as dg

from kb_core.generations import live_generation
from kb_core.learned_facts import fact_counts, index_learned_facts
from kb_pipeline.defs.resources import EmbedderResource, PostgresResource, facts_embedder_for

__all__ = ["learned_facts"]


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
