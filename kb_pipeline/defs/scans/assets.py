# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""scanned_pages: the OCR step, in a job and a concurrency pool of its own, so text documents
never wait behind scans: ingestion hands a scan over (ocr_waiting) and takes it back once its
pages are in the OCR cache."""

import dagster as dg

from kb_pipeline.defs.resources import (
    EmbedderResource,
    GraphLlmResource,
    OcrResource,
    PostgresResource,
    running_version,
)
from kb_pipeline.runs import DOCUMENTS_PARTITIONS
from kb_pipeline.stages import RunScope, read_scanned_pages

__all__ = ["OCR_POOL", "scanned_pages"]

OCR_POOL = "ocr"  # Dagster's concurrency pool of the steps that run the OCR engine


@dg.asset(kinds={"python", "postgres"}, partitions_def=DOCUMENTS_PARTITIONS,
          backfill_policy=dg.BackfillPolicy.single_run(), group_name="scans", pool=OCR_POOL)
def scanned_pages(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
    graph_llm: GraphLlmResource, ocr: OcrResource,
) -> dg.MaterializeResult:
    """Pages of scanned PDFs and image files read by OCR (Tesseract, Japanese horizontal and
    縦書き), kept by the page image's digest, the engine and the resolution: a rebuild reads no
    page again, and a changed page alone is read again. Metadata: pages read and found in the
    cache, pages without text, mean confidence, seconds spent reading."""
    scope = RunScope(keys=list(context.partition_keys), run_id=context.run.run_id,
                     version=running_version(embedder, graph_llm))
    with postgres.connection() as conn:
        report = read_scanned_pages(conn, scope, ocr.settings())
    return dg.MaterializeResult(metadata=report.metadata())
