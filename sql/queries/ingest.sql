-- name: source_of
SELECT root, path, fallback_groups FROM document_sources WHERE source_uri = %(uri)s;

-- name: indexed_checksum
SELECT checksum, pipeline_version FROM documents WHERE source_uri = %(uri)s;

-- name: stage_document
INSERT INTO staged_documents (source_uri, checksum, size_bytes, file_mtime, pipeline_version,
                              allowed_groups, access_rule, run_id)
VALUES (%(uri)s, %(checksum)s, %(size)s, %(mtime)s, %(version)s, %(groups)s, %(rule)s, %(run_id)s)
ON CONFLICT (source_uri) DO UPDATE
SET checksum = EXCLUDED.checksum, size_bytes = EXCLUDED.size_bytes,
    file_mtime = EXCLUDED.file_mtime, pipeline_version = EXCLUDED.pipeline_version,
    allowed_groups = EXCLUDED.allowed_groups, access_rule = EXCLUDED.access_rule,
    run_id = EXCLUDED.run_id, parsed = NULL, chunks = NULL, graph = NULL, tables = NULL,
    embedded = false,
    staged_at = now();

-- name: staged_for_run
SELECT source_uri, checksum, file_mtime, parsed, chunks
FROM staged_documents
WHERE run_id = %(run_id)s AND source_uri = ANY(%(uris)s)
ORDER BY source_uri;

-- name: save_parsed
UPDATE staged_documents SET parsed = %(parsed)s::jsonb
WHERE source_uri = %(uri)s AND run_id = %(run_id)s;

-- name: save_chunks
-- The passages and where each table's rows lie among them (kb_pipeline/table_placement.py).
UPDATE staged_documents SET chunks = %(chunks)s::jsonb, tables = %(tables)s::jsonb
WHERE source_uri = %(uri)s AND run_id = %(run_id)s;

-- name: save_graph
UPDATE staged_documents SET graph = %(graph)s::jsonb
WHERE source_uri = %(uri)s AND run_id = %(run_id)s;

-- name: cached_extractions
-- The LLM extractor's cached readings of these passage texts (kb_pipeline/graph_llm.py).
SELECT text_sha256, extraction FROM graph_llm_cache
WHERE model = %(model)s AND prompt_version = %(prompt_version)s
  AND text_sha256 = ANY(%(shas)s::text[]);

-- name: cache_extractions
-- A reading another run cached meanwhile stays (same model, prompt and text). In key order, so
-- two runs caching overlapping passages do not deadlock.
INSERT INTO graph_llm_cache (model, prompt_version, text_sha256, extraction)
SELECT %(model)s, %(prompt_version)s, r->>'sha256', r->'extraction'
FROM jsonb_array_elements(%(rows)s::jsonb) r
ORDER BY r->>'sha256'
ON CONFLICT DO NOTHING;

-- name: texts_to_embed
-- Embedding views of this run's chunks that the model has not embedded before.
SELECT DISTINCT v->>'sha256' AS sha256, v->>'text' AS text
FROM staged_documents s, jsonb_array_elements(s.chunks) c, jsonb_array_elements(c->'views') v
WHERE s.run_id = %(run_id)s AND s.source_uri = ANY(%(uris)s) AND NOT s.embedded
  AND NOT EXISTS (
      SELECT 1 FROM embedding_cache e
      WHERE e.model = %(model)s AND e.text_sha256 = v->>'sha256'
  );

-- name: embedding_scratch
-- Where one batch of new vectors lands before joining the cache (emptied at each commit).
CREATE TEMP TABLE IF NOT EXISTS new_embeddings (
    model text NOT NULL, text_sha256 text NOT NULL, embedding vector NOT NULL
) ON COMMIT DELETE ROWS;

-- name: cache_new_embeddings
-- A text another run cached meanwhile keeps its vector (same model, same text: same vector).
-- Inserting in key order keeps two runs caching overlapping batches from deadlocking.
INSERT INTO embedding_cache (model, text_sha256, embedding)
SELECT DISTINCT ON (model, text_sha256) model, text_sha256, embedding
FROM new_embeddings
ORDER BY model, text_sha256
ON CONFLICT (model, text_sha256) DO NOTHING;

-- name: mark_embedded
UPDATE staged_documents SET embedded = true
WHERE run_id = %(run_id)s AND source_uri = ANY(%(uris)s) AND chunks IS NOT NULL;

-- name: ready_to_index
SELECT source_uri FROM staged_documents
WHERE run_id = %(run_id)s AND source_uri = ANY(%(uris)s) AND embedded AND graph IS NOT NULL
ORDER BY source_uri;

-- name: lock_staged
-- The staged version this run is about to publish, locked until the publishing transaction
-- ends, so no other run can re-stage the file in between; with its numbers of chunks and of
-- embedding views.
SELECT jsonb_array_length(chunks),
       (SELECT count(*) FROM jsonb_array_elements(chunks) c, jsonb_array_elements(c->'views')),
       checksum
FROM staged_documents
WHERE source_uri = %(uri)s AND run_id = %(run_id)s AND embedded AND graph IS NOT NULL
FOR UPDATE;

-- name: restage_access
-- The access rule as it is when the document is published (it may have changed since staging).
UPDATE staged_documents SET allowed_groups = %(groups)s, access_rule = %(rule)s
WHERE source_uri = %(uri)s AND run_id = %(run_id)s;

-- name: upsert_document
-- The live row of a document, from its staged version (title and revision date from the parse);
-- with whether the row is new here (PostgreSQL 18's RETURNING old), so has no chunks to replace.
INSERT INTO documents AS d (source_uri, path, title, mime, size_bytes, checksum, pipeline_version,
                            allowed_groups, access_rule, revision_date, revision_source,
                            file_mtime)
SELECT s.source_uri, src.path, s.parsed->>'title', s.parsed->>'mime', s.size_bytes, s.checksum,
       s.pipeline_version, s.allowed_groups, s.access_rule,
       COALESCE((s.parsed->>'revision_date')::date, s.file_mtime::date),
       CASE WHEN s.parsed->>'revision_date' IS NULL THEN 'mtime' ELSE 'document' END,
       s.file_mtime
FROM staged_documents s JOIN document_sources src USING (source_uri)
WHERE s.source_uri = %(uri)s AND s.run_id = %(run_id)s
ON CONFLICT (source_uri) DO UPDATE
SET path = EXCLUDED.path, title = EXCLUDED.title, mime = EXCLUDED.mime,
    size_bytes = EXCLUDED.size_bytes, checksum = EXCLUDED.checksum,
    pipeline_version = EXCLUDED.pipeline_version, allowed_groups = EXCLUDED.allowed_groups,
    access_rule = EXCLUDED.access_rule, revision_date = EXCLUDED.revision_date,
    revision_source = EXCLUDED.revision_source, file_mtime = EXCLUDED.file_mtime,
    ingested_at = now()
RETURNING d.id, old.id IS NULL;

-- name: record_content
-- A row of the checksum history when the staged bytes differ from the last recorded.
INSERT INTO content_history (source_uri, checksum, since)
SELECT s.source_uri, s.checksum, least(s.file_mtime, now())
FROM staged_documents s
WHERE s.source_uri = %(uri)s AND s.run_id = %(run_id)s
  AND s.checksum IS DISTINCT FROM (SELECT h.checksum FROM content_history h
                                   WHERE h.source_uri = s.source_uri
                                   ORDER BY h.id DESC LIMIT 1);

-- name: delete_chunks
DELETE FROM chunks WHERE document_id = %(document_id)s;

-- name: insert_chunks
-- The staged chunks, then the vector of each of their embedding views from the cache (a view
-- whose vector is missing is not inserted: the caller counts them).
WITH inserted AS (
    INSERT INTO chunks (document_id, chunk_index, heading, location, content, search_text,
                        token_count, text_sha256, allowed_groups, keywords, ocr)
    SELECT %(document_id)s, (c->>'index')::int, c->>'heading', c->>'location', c->>'content',
           c->>'text', (c->>'token_count')::int, c->>'sha256', s.allowed_groups,
           (c->>'keywords')::tsvector, coalesce((c->>'ocr')::boolean, false)
    FROM staged_documents s
    CROSS JOIN jsonb_array_elements(s.chunks) c
    WHERE s.source_uri = %(uri)s AND s.run_id = %(run_id)s
    RETURNING id, chunk_index, allowed_groups
)
INSERT INTO chunk_vectors (chunk_id, view_index, allowed_groups, embedding)
SELECT i.id, v.position - 1, i.allowed_groups, e.embedding
FROM staged_documents s
CROSS JOIN jsonb_array_elements(s.chunks) c
CROSS JOIN jsonb_array_elements(c->'views') WITH ORDINALITY v (view, position)
JOIN inserted i ON i.chunk_index = (c->>'index')::int
JOIN embedding_cache e ON e.model = %(model)s AND e.text_sha256 = v.view->>'sha256'
WHERE s.source_uri = %(uri)s AND s.run_id = %(run_id)s;

-- name: insert_mentions
-- The staged graph of the passages insert_chunks has just written (kb_core/entities.py).
INSERT INTO mentions (entity_key, chunk_id, kind, name, allowed_groups, description)
SELECT e->>'key', c.id, e->>'kind', e->>'name', c.allowed_groups, e->>'description'
FROM staged_documents s
CROSS JOIN jsonb_array_elements(s.graph) g
CROSS JOIN jsonb_array_elements(g->'entities') e
JOIN chunks c ON c.document_id = %(document_id)s AND c.chunk_index = (g->>'index')::int
WHERE s.source_uri = %(uri)s AND s.run_id = %(run_id)s;

-- name: insert_relations
INSERT INTO relations (source_key, target_key, kind, chunk_id, description)
SELECT r->>'source', r->>'target', r->>'kind', c.id, r->>'description'
FROM staged_documents s
CROSS JOIN jsonb_array_elements(s.graph) g
CROSS JOIN jsonb_array_elements(g->'references') r
JOIN chunks c ON c.document_id = %(document_id)s AND c.chunk_index = (g->>'index')::int
WHERE s.source_uri = %(uri)s AND s.run_id = %(run_id)s;

-- name: insert_tables
-- The staged tables of the passages insert_chunks has just written (sql/026_tables.sql).
INSERT INTO data_tables (document_id, table_no, chunk_id, location, caption, columns, units,
                         notes, heads)
SELECT %(document_id)s, (t->>'table_no')::int, c.id, t->>'location', t->>'caption',
       ARRAY(SELECT jsonb_array_elements_text(t->'columns')),
       ARRAY(SELECT u #>> '{}' FROM jsonb_array_elements(t->'units') u),
       ARRAY(SELECT jsonb_array_elements_text(t->'notes')),
       ARRAY(SELECT coalesce(nullif(regexp_replace(h, '\([^()]*\)', '', 'g'), ''), h)
             FROM (SELECT regexp_replace(lower(normalize(split_part(col, '：', 1), NFKC)),
                                         '\s', '', 'g') AS h
                   FROM jsonb_array_elements_text(t->'columns') col) heads)
FROM staged_documents s
CROSS JOIN jsonb_array_elements(coalesce(s.tables, '[]')) t
JOIN chunks c ON c.document_id = %(document_id)s AND c.chunk_index = (t->>'chunk_index')::int
WHERE s.source_uri = %(uri)s AND s.run_id = %(run_id)s;

-- name: insert_table_rows
INSERT INTO table_rows (document_id, table_no, row_no, chunk_id, cells)
SELECT %(document_id)s, (t->>'table_no')::int, (r->>'row_no')::int, c.id,
       ARRAY(SELECT jsonb_array_elements_text(r->'cells'))
FROM staged_documents s
CROSS JOIN jsonb_array_elements(coalesce(s.tables, '[]')) t
CROSS JOIN jsonb_array_elements(t->'rows') r
JOIN chunks c ON c.document_id = %(document_id)s AND c.chunk_index = (r->>'chunk_index')::int
WHERE s.source_uri = %(uri)s AND s.run_id = %(run_id)s;

-- name: unstage
DELETE FROM staged_documents WHERE source_uri = %(uri)s AND run_id = %(run_id)s;

-- name: resolve_failures
UPDATE ingestion_failures SET resolved_at = now()
WHERE source_uri = %(uri)s AND resolved_at IS NULL;

-- name: record_failure
-- `skipped`: nothing to index in it (a blank scan), which is no error.
INSERT INTO ingestion_failures (source_uri, path, checksum, stage, pipeline_version, error, run_id,
                                skipped)
VALUES (%(uri)s, %(path)s, %(checksum)s, %(stage)s, %(version)s, %(error)s, %(run_id)s,
        %(skipped)s);

-- name: failures_of_runs
SELECT source_uri, error FROM ingestion_failures
WHERE run_id = ANY(%(run_ids)s) AND resolved_at IS NULL AND NOT skipped;

-- name: skipped_of
-- Documents skipped for want of text (a blank scan), and why, as long as their bytes are those.
SELECT DISTINCT ON (source_uri) source_uri, error FROM ingestion_failures
WHERE source_uri = ANY(%(uris)s) AND resolved_at IS NULL AND skipped
ORDER BY source_uri, failed_at DESC;

-- name: chunk_counts
-- Chunks of the documents published since the ingest began (by its runs or a concurrent one):
-- an older version still indexed is not an ingested file.
SELECT d.source_uri, count(c.id)
FROM documents d JOIN chunks c ON c.document_id = d.id
WHERE d.source_uri = ANY(%(uris)s) AND d.ingested_at >= %(since)s
GROUP BY d.source_uri;

-- name: database_now
SELECT now();

-- name: open_failures_of
SELECT DISTINCT ON (source_uri) source_uri, error FROM ingestion_failures
WHERE source_uri = ANY(%(uris)s) AND resolved_at IS NULL AND NOT skipped
ORDER BY source_uri, failed_at DESC;

-- name: lock_keyword_stats
-- Index writers serialize on the keyword statistics, which their chunks' triggers keep
-- (sql/024_statistics_per_group_set.sql): two documents sharing terms would otherwise deadlock.
SELECT pg_advisory_xact_lock(72190002);

-- name: staging_runs
SELECT DISTINCT run_id FROM staged_documents;

-- name: unstage_runs
DELETE FROM staged_documents WHERE run_id = ANY(%(run_ids)s);

-- name: staging_runs_of
SELECT source_uri, run_id FROM staged_documents WHERE source_uri = ANY(%(uris)s);

-- name: unregistered_keys
-- Partition keys whose file is no longer in the catalogue.
SELECT k FROM unnest(%(keys)s::text[]) AS k
WHERE NOT EXISTS (SELECT 1 FROM document_sources s WHERE s.source_uri = k);
