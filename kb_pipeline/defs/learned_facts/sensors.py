# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""The sensor that launches index_learned_facts when a correction is submitted or decided, or a
generation is published."""

import dagster as dg

from kb_core.generations import live_generation
from kb_core.learned_facts import corrections_changed_at
from kb_pipeline.defs.learned_facts.jobs import LEARNED_FACTS_JOB
from kb_pipeline.defs.resources import PostgresResource

__all__ = ["learned_facts_sensor"]


@dg.sensor(job=LEARNED_FACTS_JOB, minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING)
def learned_facts_sensor(
    context: dg.SensorEvaluationContext, postgres: PostgresResource
) -> dg.SensorResult:
    """A run of learned_facts whenever a correction is submitted or decided, or a generation
    is published."""
    with postgres.connection() as conn:
        state = f"{live_generation(conn).id}:{corrections_changed_at(conn)}"
    if state == context.cursor:
        return dg.SensorResult(cursor=state)
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=state)], cursor=state)
