"""index_learned_facts: the job that runs learned_facts whenever corrections change."""

import dagster as dg

from kb_pipeline.defs.learned_facts.assets import learned_facts

__all__ = ["LEARNED_FACTS_JOB"]

LEARNED_FACTS_JOB = dg.define_asset_job(
    "index_learned_facts", selection=[learned_facts],
    description="Index approved corrections the live generation lacks; count corrections.")
