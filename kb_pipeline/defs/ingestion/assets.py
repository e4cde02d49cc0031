# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""The ingestion assets: raw_documents → parsed_documents → chunks → chunk_embeddings and
entity_graph → search_index, one dynamic partition per document. A run tagged with an index
generation (runs.GENERATION_TAG) writes that generation's tables instead of the live ones.

Each asset takes many partitions in one run (a single-run backfill policy), because a run's
start-up costs more than a document's parsing: a sensor tick over 1,000 changed files launches
a few runs, not 1,000. State passes between assets through the staging tables in PostgreSQL.
"""


import dagster as dg

from kb_core.generations import live_awaits_rebuild
from kb_pipeline.defs.resources import (
    EmbedderResource,
    FoldersResource,
    GraphLlmResource,
    OcrResource,
    PostgresResource,
    running_version,
)
from kb_pipeline.runs import DOCUMENTS_PARTITIONS, run_generation
from kb_pipeline.stages import (
    RunScope,
    chunk_documents,
    embed_chunks,
    graph_documents,
    index_documents,
    parse_documents,
    stage_documents,
)

__all__ = [
    "EMBEDDING_POOL",
    "chunk_embeddings",
    "chunks",
    "entity_graph",
    "parsed_documents",
    "raw_documents",
    "search_index",
]

EMBEDDING_POOL = "embedding"  # Dagster's concurrency pool of the steps that embed

_INGESTION = {
    "partitions_def": DOCUMENTS_PARTITIONS,
    "backfill_policy": dg.BackfillPolicy.single_run(),
    "group_name": "ingestion",
}


def _scope(context: dg.AssetExecutionContext, embedder: EmbedderResource,
           graph_llm: GraphLlmResource) -> RunScope:
    return RunScope(
        keys=list(context.partition_keys),
        run_id=context.run.run_id,
        version=running_version(embedder, graph_llm),
        generation=run_generation(context.run.tags),
    )


class RawDocumentsConfig(dg.Config):
    force: bool = False  # reprocess documents whose bytes and pipeline version are unchanged


@dg.asset(kinds={"python", "postgres"}, **_INGESTION)
def raw_documents(
    context: dg.AssetExecutionContext,
    config: RawDocumentsConfig,
    postgres: PostgresResource,
    embedder: EmbedderResource,
    graph_llm: GraphLlmResource,
    folders: FoldersResource,
) -> dg.MaterializeResult:
    """The company's files as found in the watched folders: bytes' SHA-256, size and the access
    groups their folder grants. Files whose bytes and pipeline version are already indexed are
    skipped here, so re-running a partition is cheap."""
    scope = _scope(context, embedder, graph_llm)
    with postgres.connection(scope.generation) as conn:
        # A live generation built by another pipeline version takes content changes only: the
        # new version reaches it through a rebuilt generation, gated by its evaluation.
        content_only = scope.generation is None and live_awaits_rebuild(conn, scope.version)
        report = stage_documents(
            conn, scope, folders.max_file_bytes(), force=config.force, content_only=content_only
        )
    return dg.MaterializeResult(metadata=report.metadata())


@dg.asset(kinds={"python", "postgres"}, deps=[raw_documents], **_INGESTION)
def parsed_documents(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
    graph_llm: GraphLlmResource, ocr: OcrResource,
) -> dg.MaterializeResult:
    """Each document's text with its structure kept: headings, tables, and the page, sheet or
    slide each passage came from, plus the revision date it states. Scanned pages come from
    the OCR cache; a scan with pages not read yet is handed to the read_scans job and left
    out of this run (metadata: waiting_for_ocr), its last good version still searchable."""
    scope = _scope(context, embedder, graph_llm)
    with postgres.connection(scope.generation) as conn:
        report = parse_documents(conn, scope, ocr.settings())
    return dg.MaterializeResult(metadata=report.metadata())


@dg.asset(kinds={"python", "postgres"}, deps=[parsed_documents], **_INGESTION)
def chunks(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
    graph_llm: GraphLlmResource,
) -> dg.MaterializeResult:
    """Passages cut at headings (第N条, 見出し) and sentence ends, each within the embedding
    model's window and carrying its document title and heading path."""
    scope = _scope(context, embedder, graph_llm)
    with postgres.connection(scope.generation) as conn:
        report = chunk_documents(conn, scope, embedder.get())
    return dg.MaterializeResult(metadata=report.metadata())


@dg.asset(kinds={"python", "postgres"}, deps=[chunks], pool=EMBEDDING_POOL, **_INGESTION)
def chunk_embeddings(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
    graph_llm: GraphLlmResource,
) -> dg.MaterializeResult:
    """Vectors of the passages. A passage text this model embedded before is never embedded
    again, so editing one paragraph of a long document re-embeds only what changed. Steps of
    the `embedding` pool: its limit (KB_EMBED_STEPS) bounds how many embed at once, across
    runs, so many workers do not overrun the model's cores or the embedding servers."""
    scope = _scope(context, embedder, graph_llm)
    model = embedder.get()
    with postgres.connection(scope.generation) as conn:
        report = embed_chunks(conn, scope, model, embedder.texts_per_call(model))
    return dg.MaterializeResult(metadata=report.metadata())


@dg.asset(kinds={"python", "postgres"}, deps=[chunks], **_INGESTION)
def entity_graph(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
    graph_llm: GraphLlmResource,
) -> dg.MaterializeResult:
    """The entities each passage names (codes, 規程 and their 条, departments, factories, roles)
    and the references it makes between them (a table row, 「〜による」, 関連報告書), by rule,
    offline; with KB_GRAPH_LLM, also what a chat model reads in each passage (entities,
    relations, descriptions), tied to what the passage shows. search_index commits them with
    the passages; the graph leg of search follows them one reference away. Metadata with the
    model: passages it read (llm_extracted), found in its cache (llm_cached), failed on
    (llm_failed: those keep the rules' graph) and entities it named that the passage does not
    (llm_dropped)."""
    scope = _scope(context, embedder, graph_llm)
    extractor = graph_llm.get()
    with postgres.connection(scope.generation) as conn:
        report = graph_documents(conn, scope, extractor)
    return dg.MaterializeResult(metadata=report.metadata())


@dg.asset(kinds={"postgres", "pgvector"}, deps=[chunk_embeddings, entity_graph], **_INGESTION)
def search_index(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
    graph_llm: GraphLlmResource,
) -> dg.MaterializeResult:
    """The searchable index employees query: documents and chunks with vectors (HNSW),
    2-gram keywords (GIN) and their entity graph. Each document is replaced in one
    transaction."""
    scope = _scope(context, embedder, graph_llm)
    with postgres.connection(scope.generation) as conn:
        report = index_documents(conn, scope, embedder.get())
    return dg.MaterializeResult(metadata=report.metadata())
