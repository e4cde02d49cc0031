-- name: backup_counts
-- What a backup holds, for its manifest and the restore's summary.
SELECT (SELECT count(*) FROM documents) AS documents,
       (SELECT count(*) FROM chunks) AS chunks,
       (SELECT count(*) FROM api_tokens) AS api_tokens,
       (SELECT count(*) FROM query_log) AS query_log,
       (SELECT count(*) FROM feedback) AS feedback,
       (SELECT count(*) FROM corrections) AS corrections;

-- name: backup_roots
SELECT DISTINCT root FROM document_sources ORDER BY root;

-- name: record_restore
INSERT INTO restores (backup_taken_at) VALUES (%(taken_at)s);

-- name: restore_awaiting_rules
-- A restore whose access rules the folder sensor has not read again yet.
SELECT restored_at FROM restores WHERE rules_reread_at IS NULL LIMIT 1;

-- name: rules_reread
UPDATE restores SET rules_reread_at = now() WHERE rules_reread_at IS NULL;

-- name: path_columns
-- Every stored column holding a watched file's path or its folder's (the catalogue, each index
-- generation's documents and staging, failures, OCR waits, corrections' sources).
SELECT table_schema, table_name, column_name
FROM information_schema.columns c
JOIN information_schema.tables t USING (table_schema, table_name)
WHERE t.table_type = 'BASE TABLE' AND column_name IN ('source_uri', 'root', 'access_rule')
  AND (table_schema = 'public' OR table_schema LIKE 'kb\_gen\_%')
-- Corrections' sources first: a documents table's trigger retires the corrections whose
-- documents it no longer finds at their paths.
ORDER BY table_name <> 'correction_sources', table_schema, table_name, column_name;
