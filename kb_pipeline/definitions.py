"""The one Definitions object of the code location (workspace.yaml loads `defs`)."""

import dagster as dg

from kb_core.settings import Settings
from kb_pipeline.defs import ingestion
from kb_pipeline.defs.checks import INDEX_CHECKS
from kb_pipeline.defs.evaluation import EVALUATION_SENSOR, retrieval_evaluation
from kb_pipeline.defs.generations import (
    GATE_JOB,
    discard_generation_job,
    generation_evaluation,
    generation_search_indexes,
    published_generation,
)
from kb_pipeline.defs.learned_facts import (
    LEARNED_FACTS_JOB,
    learned_facts,
    learned_facts_sensor,
)
from kb_pipeline.defs.resources import resources_for
from kb_pipeline.defs.run_logging import RUN_LOGGERS
from kb_pipeline.defs.sensor import docs_folder_sensor

__all__ = ["defs", "make_definitions"]

def make_definitions(settings: Settings) -> dg.Definitions:
    """Every asset, check, job and sensor, with the resources of `settings` (its database URL
    resolved)."""
    return dg.Definitions(
        assets=[
            *dg.load_assets_from_modules([ingestion]),
            retrieval_evaluation,
            generation_evaluation,
            generation_search_indexes,
            published_generation,
            learned_facts,
        ],
        asset_checks=INDEX_CHECKS,
        jobs=[ingestion.INGEST_JOB, GATE_JOB, discard_generation_job, LEARNED_FACTS_JOB],
        sensors=[docs_folder_sensor, EVALUATION_SENSOR, learned_facts_sensor],
        resources=resources_for(settings),
        loggers=RUN_LOGGERS,
    )


@dg.definitions
def defs() -> dg.Definitions:
    """The code location `kb up` starts: the configuration is read when the code server or a
    run's process loads it, from the environment `kb up` gives them."""
    return make_definitions(Settings.from_env())
