"""read_scans: the job the folder sensor and `kb ingest` launch over documents waiting for OCR."""

import dagster as dg

from kb_pipeline.defs.scans.assets import scanned_pages
from kb_pipeline.runs import DOCUMENTS_PARTITIONS

__all__ = ["READ_SCANS_JOB"]

READ_SCANS_JOB = dg.define_asset_job(
    "read_scans", selection=[scanned_pages], partitions_def=DOCUMENTS_PARTITIONS,
    description="Read by OCR the pages of scans waiting for it.")
