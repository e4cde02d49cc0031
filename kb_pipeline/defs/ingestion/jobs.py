"""ingest_documents: the job the folder sensor, `kb ingest` and a rebuild's build rounds launch
over ranges of documents partitions."""

import dagster as dg

from kb_pipeline.runs import DOCUMENTS_PARTITIONS

__all__ = ["INGEST_JOB"]

INGEST_JOB = dg.define_asset_job(
    "ingest_documents",
    selection=dg.AssetSelection.groups("ingestion"),
    partitions_def=DOCUMENTS_PARTITIONS,
    description="Parse, chunk, embed and index changed documents.",
)
