# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""Asset checks on search_index: integrity (blocking, ERROR) and access coverage (WARN). In a
rebuild's runs they check the documents each run wrote into the generation being built, which
its gate then checks whole (defs/generations/assets.py)."""


import dagster as dg

from kb_core.ingestion_failures import open_failures
from kb_pipeline.access import documents_without_rule
from kb_pipeline.defs.ingestion.assets import search_index
from kb_pipeline.defs.resources import PostgresResource
from kb_pipeline.integrity import graph_size, table_size, violations, violations_markdown
from kb_pipeline.runs import run_generation

__all__ = [
    "INDEX_CHECKS",
    "chunks_have_valid_embeddings",
    "documents_have_access_rules",
    "documents_have_whole_chunk_sets",
    "entity_graph_is_whole",
    "keyword_statistics_match_chunks",
    "no_open_ingestion_failures",
    "no_orphan_documents",
    "tables_are_whole",
]

Context = dg.AssetCheckExecutionContext


def _generation(context: Context) -> int | None:
    # op_execution_context.run_tags, not context.run: it also answers when a test invokes a
    # check directly, outside any run.
    return run_generation(context.op_execution_context.run_tags)


def _documents(context: Context) -> list[str] | None:
    """The documents a check looks at: in a rebuild's run, those of the run's partitions,
    which are all it wrote (each run checking the whole generation cost a full scan per run,
    hours at 1M passages; the gate checks the generation whole once, see
    defs/generations/); elsewhere None, the whole index, since the folder sensor also
    changes the live index outside runs (access rules)."""
    if _generation(context) is None or not (
            context.has_partition_key or context.has_partition_key_range):
        return None
    return list(context.partition_keys)


def _rows_check(context: Context, postgres: PostgresResource, name: str,
               counts: dict[str, int] | None = None) -> dg.AssetCheckResult:
    with postgres.connection(_generation(context)) as conn:
        rows = violations(conn, name, _documents(context))
    return dg.AssetCheckResult(
        passed=not rows,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"violations": len(rows),
                  "examples": dg.MetadataValue.md(violations_markdown(name, rows)),
                  **(counts or {})},
    )


@dg.asset_check(asset=search_index, blocking=True)
def chunks_have_valid_embeddings(
    context: Context, postgres: PostgresResource
) -> dg.AssetCheckResult:
    """Every chunk has vectors, each unit-length, of the index's recorded dimension and readable
    by exactly the chunk's groups."""
    return _rows_check(context, postgres, "chunks_with_bad_embeddings")


@dg.asset_check(asset=search_index, blocking=True)
def documents_have_whole_chunk_sets(
    context: Context, postgres: PostgresResource
) -> dg.AssetCheckResult:
    """Every document has chunks 0..n-1 exactly once, carrying the document's groups."""
    return _rows_check(context, postgres, "documents_with_broken_chunks")


@dg.asset_check(asset=search_index, blocking=True)
def keyword_statistics_match_chunks(
    context: Context, postgres: PostgresResource
) -> dg.AssetCheckResult:
    """Each set of groups' recorded number of passages, by which searches weigh terms and
    choose their plan, is the number of chunks that hold it."""
    return _rows_check(context, postgres, "keyword_statistics_drift")


@dg.asset_check(asset=search_index, blocking=True)
def entity_graph_is_whole(context: Context, postgres: PostgresResource) -> dg.AssetCheckResult:
    """Every reference's passage names both its entities, and no entity is named with two
    kinds; with the graph's size."""
    with postgres.connection(_generation(context)) as conn:
        size = graph_size(conn, _documents(context))
    return _rows_check(context, postgres, "broken_graph", {
        "entities": size.entities, "mentions": size.mentions, "references": size.references})


@dg.asset_check(asset=search_index, blocking=True)
def tables_are_whole(context: Context, postgres: PostgresResource) -> dg.AssetCheckResult:
    """Every table row is held by a passage of its own document and is as wide as its table,
    and every table kept as cells has rows; with how many there are."""
    with postgres.connection(_generation(context)) as conn:
        tables, rows = table_size(conn, _documents(context))
    return _rows_check(context, postgres, "broken_tables", {"tables": tables, "table_rows": rows})


@dg.asset_check(asset=search_index, blocking=True)
def no_orphan_documents(context: Context, postgres: PostgresResource) -> dg.AssetCheckResult:
    """Every indexed document is a file the catalogue still knows."""
    return _rows_check(context, postgres, "orphan_documents")


@dg.asset_check(asset=search_index)
def documents_have_access_rules(
    context: Context, postgres: PostgresResource
) -> dg.AssetCheckResult:
    """Documents without an access rule are visible to nobody: list them so someone adds one."""
    with postgres.connection(_generation(context)) as conn:
        paths = documents_without_rule(conn)
    return dg.AssetCheckResult(
        passed=not paths,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "documents_without_rule": len(paths),
            "paths": dg.MetadataValue.md("\n".join(f"- {p}" for p in paths) or "none"),
        },
    )


@dg.asset_check(asset=search_index)
def no_open_ingestion_failures(postgres: PostgresResource) -> dg.AssetCheckResult:
    """Files that could not be ingested (their last good version, if any, is still served)."""
    with postgres.connection() as conn:
        failures = open_failures(conn)
    return dg.AssetCheckResult(
        passed=not failures,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "open_failures": len(failures),
            "failures": dg.MetadataValue.md(
                "\n".join(f"- {f.path} ({f.stage}): {f.error}" for f in failures) or "none"
            ),
        },
    )


INDEX_CHECKS = [
    chunks_have_valid_embeddings,
    documents_have_whole_chunk_sets,
    entity_graph_is_whole,
    tables_are_whole,
    keyword_statistics_match_chunks,
    no_orphan_documents,
    documents_have_access_rules,
    no_open_ingestion_failures,
]
