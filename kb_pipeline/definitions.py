"""The one Definitions object of the code location (workspace.yaml loads this module)."""


import dagster as dg

from kb_pipeline import assets
from kb_pipeline.checks import INDEX_CHECKS
from kb_pipeline.evaluation import EVALUATION_SENSOR, retrieval_evaluation
from kb_pipeline.generations import (
    GATE_JOB,
    discard_generation_job,
    generation_evaluation,
    published_generation,
)
from kb_pipeline.resources import EmbedderResource, PostgresResource
from kb_pipeline.sensor import docs_folder_sensor

__all__ = ["defs"]

defs = dg.Definitions(
    assets=[
        *dg.load_assets_from_modules([assets]),
        retrieval_evaluation,
        generation_evaluation,
        published_generation,
    ],
    asset_checks=INDEX_CHECKS,
    jobs=[assets.INGEST_JOB, GATE_JOB, discard_generation_job],
    sensors=[docs_folder_sensor, EVALUATION_SENSOR],
    resources={
        # Read when a run or sensor evaluation starts; `kb up` and `kb ingest` set both.
        "postgres": PostgresResource(url=dg.EnvVar("KB_DATABASE_URL")),
        "embedder": EmbedderResource(name=dg.EnvVar("KB_EMBEDDER")),
    },
)
