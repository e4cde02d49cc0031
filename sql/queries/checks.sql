-- name: chunks_with_bad_embeddings
-- Chunks without a vector, or with one of another dimension than recorded, not unit length,
-- or readable by other groups than the chunk; of the documents given (uris; NULL: all).
SELECT d.path, c.chunk_index
FROM chunks c JOIN documents d ON d.id = c.document_id
WHERE (%(uris)s::text[] IS NULL OR d.source_uri = ANY(%(uris)s))
  AND (NOT EXISTS (SELECT 1 FROM chunk_vectors v WHERE v.chunk_id = c.id)
   OR EXISTS (
       SELECT 1 FROM chunk_vectors v
       WHERE v.chunk_id = c.id
         AND (vector_dims(v.embedding)
                  <> (SELECT value::int FROM index_settings WHERE key = 'embedding_dim')
              OR abs(vector_norm(v.embedding) - 1) > 0.01
              OR v.allowed_groups IS DISTINCT FROM c.allowed_groups)))
LIMIT 20;

-- name: documents_with_broken_chunks
-- Documents without chunks, or whose chunk positions are not exactly 0..n-1 (a half-replaced
-- or duplicated document), or whose chunks disagree with them about who may read them; of the
-- documents given (uris; NULL: all).
SELECT d.path,
       count(c.id) AS chunks,
       count(DISTINCT c.chunk_index) AS positions,
       coalesce(max(c.chunk_index), -1) AS last_position,
       bool_or(c.allowed_groups IS DISTINCT FROM d.allowed_groups) AS groups_differ
FROM documents d LEFT JOIN chunks c ON c.document_id = d.id
WHERE %(uris)s::text[] IS NULL OR d.source_uri = ANY(%(uris)s)
GROUP BY d.id, d.path
HAVING count(c.id) = 0
    OR count(DISTINCT c.chunk_index) <> count(c.id)
    OR max(c.chunk_index) <> count(c.id) - 1
    OR bool_or(c.allowed_groups IS DISTINCT FROM d.allowed_groups)
LIMIT 20;

-- name: keyword_statistics_drift
-- Sets of groups and groups whose recorded number of passages (the term '' of keyword_df, per
-- set, and of keyword_df_by_group, per group) differs from the chunks that hold them: searches
-- would weigh terms and choose their plan by a wrong count (sql/024, sql/025).
WITH passages AS (SELECT canonical_groups(allowed_groups) AS groups FROM chunks),
counted AS (
    SELECT 'set ' || groups::text AS passages_of, count(*) AS chunks FROM passages GROUP BY 1
    UNION ALL
    SELECT 'group ' || g, count(*) FROM passages, unnest(groups) g GROUP BY 1
), recorded AS (
    SELECT 'set ' || s.groups::text AS passages_of, d.df AS chunks
    FROM keyword_df d JOIN group_sets s ON s.id = d.set_id WHERE d.term = ''
    UNION ALL
    SELECT 'group ' || group_name, df FROM keyword_df_by_group WHERE term = ''
)
SELECT coalesce(r.passages_of, c.passages_of), coalesce(r.chunks, 0), coalesce(c.chunks, 0)
FROM recorded r FULL JOIN counted c ON c.passages_of = r.passages_of
WHERE coalesce(r.chunks, 0) <> coalesce(c.chunks, 0)
LIMIT 20;

-- name: keyword_df_drift
-- How many rows of keyword_df and keyword_df_by_group and the chunks disagree on (rows at zero
-- are kept by design). Every term of every passage: for tests and bench/crash.py, too slow for
-- a check at 1M passages.
WITH kept AS (
    SELECT 'set ' || s.groups::text AS passages_of, d.term, d.df
    FROM keyword_df d LEFT JOIN group_sets s ON s.id = d.set_id WHERE d.df <> 0
    UNION ALL
    SELECT 'group ' || group_name, term, df FROM keyword_df_by_group WHERE df <> 0
),
passages AS (SELECT canonical_groups(allowed_groups) AS groups, keywords FROM chunks),
held AS (
    SELECT passages_of, term, df FROM (
        SELECT 'set ' || groups::text AS passages_of, lexeme AS term, count(*)::int AS df
        FROM passages, unnest(keywords) GROUP BY 1, 2
        UNION ALL SELECT 'set ' || groups::text, '', count(*)::int FROM passages GROUP BY 1
        UNION ALL SELECT 'group ' || g, lexeme, count(*)::int
        FROM passages, unnest(groups) g, unnest(keywords) GROUP BY 1, 2
        UNION ALL SELECT 'group ' || g, '', count(*)::int FROM passages, unnest(groups) g
        GROUP BY 1
    ) t WHERE df <> 0
)
SELECT count(*) FROM ((TABLE kept EXCEPT TABLE held) UNION ALL (TABLE held EXCEPT TABLE kept)) d;

-- name: orphan_documents
-- Indexed documents whose file is no longer in the catalogue of watched files, of the
-- documents given (uris; NULL: all).
SELECT d.path FROM documents d
WHERE (%(uris)s::text[] IS NULL OR d.source_uri = ANY(%(uris)s))
  AND NOT EXISTS (SELECT 1 FROM document_sources s WHERE s.source_uri = d.source_uri)
LIMIT 20;

-- name: broken_graph
-- References whose evidence passage does not name both their entities, entities named with
-- two kinds, and mentions readable by other groups than their passage, of the documents given
-- (uris; NULL: all).
SELECT d.path, c.chunk_index, r.source_key || ' → ' || r.target_key
FROM relations r
JOIN chunks c ON c.id = r.chunk_id
JOIN documents d ON d.id = c.document_id
WHERE (%(uris)s::text[] IS NULL OR d.source_uri = ANY(%(uris)s))
  AND (NOT EXISTS (SELECT 1 FROM mentions m
                   WHERE m.chunk_id = r.chunk_id AND m.entity_key = r.source_key)
    OR NOT EXISTS (SELECT 1 FROM mentions m
                   WHERE m.chunk_id = r.chunk_id AND m.entity_key = r.target_key))
UNION ALL
(SELECT d.path, c.chunk_index, m.entity_key || ' (' || m.kind || ', ' || m.allowed_groups::text || ')'
 FROM mentions m
 JOIN chunks c ON c.id = m.chunk_id
 JOIN documents d ON d.id = c.document_id
 WHERE (%(uris)s::text[] IS NULL OR d.source_uri = ANY(%(uris)s))
   AND (EXISTS (SELECT 1 FROM mentions o WHERE o.entity_key = m.entity_key AND o.kind <> m.kind)
        OR m.allowed_groups IS DISTINCT FROM c.allowed_groups))
LIMIT 20;

-- name: broken_tables
-- Table rows held by a passage of another document, rows not as wide as their table's columns,
-- and tables without a row (sql/026_tables.sql), of the documents given (uris; NULL: all).
SELECT d.path, t.table_no, 'row ' || r.row_no || ': ' || CASE
    WHEN c.document_id <> t.document_id THEN 'held by a passage of another document'
    ELSE cardinality(r.cells) || ' cells under ' || cardinality(t.columns) || ' columns' END
FROM data_tables t
JOIN documents d ON d.id = t.document_id
JOIN table_rows r ON r.document_id = t.document_id AND r.table_no = t.table_no
JOIN chunks c ON c.id = r.chunk_id
WHERE (%(uris)s::text[] IS NULL OR d.source_uri = ANY(%(uris)s))
  AND (c.document_id <> t.document_id OR cardinality(r.cells) <> cardinality(t.columns))
UNION ALL
(SELECT d.path, t.table_no, 'no row'
 FROM data_tables t
 JOIN documents d ON d.id = t.document_id
 WHERE (%(uris)s::text[] IS NULL OR d.source_uri = ANY(%(uris)s))
   AND NOT EXISTS (SELECT 1 FROM table_rows r
                   WHERE r.document_id = t.document_id AND r.table_no = t.table_no))
LIMIT 20;

-- name: table_counts
-- Tables and table rows of the documents given (uris; NULL: all).
SELECT count(DISTINCT (t.document_id, t.table_no)), count(r.row_no)
FROM data_tables t
JOIN documents d ON d.id = t.document_id
LEFT JOIN table_rows r ON r.document_id = t.document_id AND r.table_no = t.table_no
WHERE %(uris)s::text[] IS NULL OR d.source_uri = ANY(%(uris)s);

-- name: graph_counts
-- Entities, mentions and references of the documents given (uris; NULL: all).
WITH passages AS (
    SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id
    WHERE %(uris)s::text[] IS NULL OR d.source_uri = ANY(%(uris)s)
)
SELECT count(DISTINCT m.entity_key), count(*),
       (SELECT count(*) FROM relations r WHERE r.chunk_id IN (SELECT id FROM passages))
FROM mentions m WHERE m.chunk_id IN (SELECT id FROM passages);

-- name: documents_without_access_rule
SELECT path FROM documents WHERE access_rule IS NULL ORDER BY path;

-- name: open_failures
-- A document skipped for want of text (a blank scan) is no failure: `kb ingest` says so instead.
SELECT DISTINCT ON (source_uri) path, stage, error, failed_at
FROM ingestion_failures
WHERE resolved_at IS NULL AND NOT skipped
ORDER BY source_uri, failed_at DESC;
