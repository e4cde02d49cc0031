# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""The ingestion asset graph: raw_documents → parsed_documents → chunks → chunk_embeddings →
search_index, one dynamic partition per document.

Each asset takes many partitions in one run (a single-run backfill policy), because a run's
start-up costs more than a document's parsing: a sensor tick over 1,000 changed files launches
a few runs, not 1,000. State passes between assets through the staging tables in PostgreSQL.
"""


import dagster as dg

from kb_pipeline.resources import EmbedderResource, PostgresResource
from kb_pipeline.stages import (
    RunScope,
    chunk_documents,
    embed_chunks,
    index_documents,
    parse_documents,
    pipeline_version,
    stage_documents,
)

__all__ = [
    "chunk_embeddings",
    "chunks",
    "documents_partitions",
    "parsed_documents",
    "raw_documents",
    "search_index",
]

documents_partitions = dg.DynamicPartitionsDefinition(name="documents")

_INGESTION = {
    "partitions_def": documents_partitions,
    "backfill_policy": dg.BackfillPolicy.single_run(),
    "group_name": "ingestion",
}


def _scope(context: dg.AssetExecutionContext, embedder: EmbedderResource) -> RunScope:
    return RunScope(
        keys=list(context.partition_keys),
        run_id=context.run.run_id,
        version=pipeline_version(embedder.get()),
    )


class RawDocumentsConfig(dg.Config):
    force: bool = False  # reprocess documents whose bytes and pipeline version are unchanged
    max_file_mb: int = 50  # larger files fail with a precise message instead of filling memory


@dg.asset(kinds={"python", "postgres"}, **_INGESTION)
def raw_documents(
    context: dg.AssetExecutionContext,
    config: RawDocumentsConfig,
    postgres: PostgresResource,
    embedder: EmbedderResource,
) -> dg.MaterializeResult:
    """The company's files as found in the watched folders: bytes' SHA-256, size and the access
    groups their folder grants. Files whose bytes and pipeline version are already indexed are
    skipped here, so re-running a partition is cheap."""
    with postgres.connection() as conn:
        report = stage_documents(
            conn, _scope(context, embedder), config.max_file_mb * 2**20, config.force
        )
    return dg.MaterializeResult(metadata=report.metadata())


@dg.asset(kinds={"python", "postgres"}, deps=[raw_documents], **_INGESTION)
def parsed_documents(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """Each document's text with its structure kept: headings, tables, and the page, sheet or
    slide each passage came from, plus the revision date it states."""
    with postgres.connection() as conn:
        report = parse_documents(conn, _scope(context, embedder))
    return dg.MaterializeResult(metadata=report.metadata())


@dg.asset(kinds={"python", "postgres"}, deps=[parsed_documents], **_INGESTION)
def chunks(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """Passages cut at headings (第N条, 見出し) and sentence ends, each within the embedding
    model's window and carrying its document title and heading path."""
    with postgres.connection() as conn:
        report = chunk_documents(conn, _scope(context, embedder), embedder.get())
    return dg.MaterializeResult(metadata=report.metadata())


@dg.asset(kinds={"python", "postgres"}, deps=[chunks], **_INGESTION)
def chunk_embeddings(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """Vectors of the passages. A passage text this model embedded before is never embedded
    again, so editing one paragraph of a long document re-embeds only what changed."""
    with postgres.connection() as conn:
        report = embed_chunks(conn, _scope(context, embedder), embedder.get(), embedder.batch_size)
    return dg.MaterializeResult(metadata=report.metadata())


@dg.asset(kinds={"postgres", "pgvector"}, deps=[chunk_embeddings], **_INGESTION)
def search_index(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """The searchable index employees query: documents and chunks with vectors (HNSW) and
    2-gram keywords (GIN). Each document is replaced in one transaction."""
    with postgres.connection() as conn:
        report = index_documents(conn, _scope(context, embedder), embedder.get())
    return dg.MaterializeResult(metadata=report.metadata())
