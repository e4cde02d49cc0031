"""ingest_documents: the job the folder sensor, `kb ingest` and a rebuild's build rounds launch
over ranges of documents partitions, and the run config they launch it with."""

import dagster as dg

from kb_core.settings import Settings
from kb_pipeline.runs import DOCUMENTS_PARTITIONS

__all__ = ["INGEST_JOB", "raw_config"]

INGEST_JOB = dg.define_asset_job(
    "ingest_documents",
    selection=dg.AssetSelection.groups("ingestion"),
    partitions_def=DOCUMENTS_PARTITIONS,
    description="Parse, chunk, embed and index changed documents.",
)


def raw_config(settings: Settings) -> dict:
    """INGEST_JOB's run config: the file size limit of raw_documents."""
    return {"ops": {"raw_documents": {"config": {"max_file_mb": settings.max_file_bytes >> 20}}}}
