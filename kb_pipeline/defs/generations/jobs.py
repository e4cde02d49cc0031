# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""The jobs of index generations: `evaluate_generation`, which the folder sensor and
`kb generation rebuild` launch for a built generation (its assets: assets.py), and
`discard_generation`, launched by hand from the Dagster UI."""

import dagster as dg

from kb_core.generations import discard_generation
from kb_pipeline.defs.resources import PostgresResource
from kb_pipeline.runs import GENERATIONS_PARTITIONS, generation_running

__all__ = ["GATE_JOB", "discard_generation_job", "discard_generation_op"]

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
