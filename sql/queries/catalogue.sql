-- name: sources_under_root
SELECT source_uri FROM document_sources WHERE root = %(root)s;

-- name: register_sources
INSERT INTO document_sources (source_uri, path, root, fallback_groups)
SELECT uri, path, %(root)s, %(fallback)s
FROM unnest(%(uris)s::text[], %(paths)s::text[]) AS f (uri, path)
ON CONFLICT (source_uri) DO UPDATE
SET path = EXCLUDED.path,
    root = EXCLUDED.root,
    fallback_groups = COALESCE(EXCLUDED.fallback_groups, document_sources.fallback_groups)
-- The sensor registers every file on every tick: write only what changed, not a new row version.
WHERE (document_sources.path, document_sources.root) IS DISTINCT FROM (EXCLUDED.path, EXCLUDED.root)
   OR (EXCLUDED.fallback_groups IS NOT NULL
       AND EXCLUDED.fallback_groups IS DISTINCT FROM document_sources.fallback_groups);

-- name: document_state
-- The indexed state of each file, and the bytes of its last unresolved failure (if any).
SELECT s.source_uri, d.checksum, d.size_bytes, d.file_mtime, d.pipeline_version,
       d.allowed_groups, d.access_rule, f.checksum, s.fallback_groups
FROM document_sources s
LEFT JOIN documents d ON d.source_uri = s.source_uri
LEFT JOIN LATERAL (
    SELECT checksum FROM ingestion_failures
    WHERE source_uri = s.source_uri AND resolved_at IS NULL
      AND pipeline_version = %(version)s
    ORDER BY failed_at DESC LIMIT 1
) f ON true
WHERE s.source_uri = ANY(%(uris)s);

-- name: touch_document
UPDATE documents SET file_mtime = %(mtime)s WHERE source_uri = %(uri)s;

-- name: regroup_document
-- Documents, their chunks and the chunks' vectors and mentions change groups together, in one
-- statement.
WITH doc AS (
    UPDATE documents SET allowed_groups = %(groups)s, access_rule = %(rule)s
    WHERE source_uri = %(uri)s
    RETURNING id
), passages AS (
    UPDATE chunks SET allowed_groups = %(groups)s
    WHERE document_id IN (SELECT id FROM doc)
    RETURNING id
), mentioned AS (
    UPDATE mentions SET allowed_groups = %(groups)s
    WHERE chunk_id IN (SELECT id FROM passages)
)
UPDATE chunk_vectors SET allowed_groups = %(groups)s
WHERE chunk_id IN (SELECT id FROM passages);

-- name: forget_sources
-- A deleted file leaves the index, the catalogue and its checksum history, the staging area
-- and the wait for OCR.
WITH gone AS (
    DELETE FROM document_sources WHERE source_uri = ANY(%(uris)s)
), history AS (
    DELETE FROM content_history WHERE source_uri = ANY(%(uris)s)
), staged AS (
    DELETE FROM staged_documents WHERE source_uri = ANY(%(uris)s)
), waiting AS (
    DELETE FROM ocr_waiting WHERE source_uri = ANY(%(uris)s)
), failures AS (
    UPDATE ingestion_failures SET resolved_at = now()
    WHERE source_uri = ANY(%(uris)s) AND resolved_at IS NULL
)
DELETE FROM documents WHERE source_uri = ANY(%(uris)s);

-- name: list_documents
-- (A count per row, not GROUP BY d.id: documents is a view, which has no primary key that
-- would let the other columns follow from the id.)
SELECT d.path, d.title, d.allowed_groups, d.access_rule,
       (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunks,
       d.revision_date, d.revision_source, d.ingested_at, d.source_uri
FROM documents d
ORDER BY d.path;
