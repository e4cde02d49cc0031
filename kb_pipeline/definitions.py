"""The one Definitions object of the code location (workspace.yaml loads `defs`), gathered from
the domains of kb_pipeline/defs/: their assets and checks found in their modules, their jobs,
sensors and schedules named here."""

import dagster as dg

from kb_core.settings import Settings
from kb_pipeline.defs.evaluation import assets as evaluation_assets
from kb_pipeline.defs.evaluation.sensors import EVALUATION_SENSOR
from kb_pipeline.defs.generations import assets as generations_assets
from kb_pipeline.defs.generations.jobs import GATE_JOB, discard_generation_job
from kb_pipeline.defs.ingestion import assets as ingestion_assets
from kb_pipeline.defs.ingestion import checks as ingestion_checks
from kb_pipeline.defs.ingestion.jobs import INGEST_JOB
from kb_pipeline.defs.knowledge_gaps import assets as knowledge_gaps_assets
from kb_pipeline.defs.knowledge_gaps.schedules import KNOWLEDGE_GAPS_SCHEDULE
from kb_pipeline.defs.learned_facts import assets as learned_facts_assets
from kb_pipeline.defs.learned_facts.jobs import LEARNED_FACTS_JOB
from kb_pipeline.defs.learned_facts.sensors import learned_facts_sensor
from kb_pipeline.defs.resources import resources_for
from kb_pipeline.defs.run_logging import RUN_LOGGERS
from kb_pipeline.defs.scans import assets as scans_assets
from kb_pipeline.defs.scans.jobs import READ_SCANS_JOB
from kb_pipeline.defs.watched_folders.sensors import docs_folder_sensor

__all__ = ["defs", "make_definitions"]

_ASSET_MODULES = [ingestion_assets, scans_assets, evaluation_assets, generations_assets,
                  learned_facts_assets, knowledge_gaps_assets]
_CHECK_MODULES = [ingestion_checks]  # evaluation's and generations' checks come with their assets


def make_definitions(settings: Settings) -> dg.Definitions:
    """Every asset, check, job and sensor, with the resources of `settings` (its database URL
    resolved)."""
    return dg.Definitions(
        assets=dg.load_assets_from_modules(_ASSET_MODULES),
        asset_checks=dg.load_asset_checks_from_modules(_CHECK_MODULES),
        jobs=[INGEST_JOB, READ_SCANS_JOB, GATE_JOB, discard_generation_job, LEARNED_FACTS_JOB],
        sensors=[docs_folder_sensor, EVALUATION_SENSOR, learned_facts_sensor],
        schedules=[KNOWLEDGE_GAPS_SCHEDULE],
        resources=resources_for(settings),
        loggers=RUN_LOGGERS,
    )


@dg.definitions
def defs() -> dg.Definitions:
    """The code location `kb up` starts: the configuration is read when the code server or a
    run's process loads it, from the environment `kb up` gives them."""
    return make_definitions(Settings.from_env())
