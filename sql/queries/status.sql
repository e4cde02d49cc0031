-- name: status_counts
-- `kb status`: the live index's documents and chunks, open failures, scans waiting for OCR and
-- the database's size.
SELECT (SELECT count(*) FROM documents),
       (SELECT count(*) FROM chunks),
       (SELECT count(DISTINCT source_uri) FROM ingestion_failures
        WHERE resolved_at IS NULL AND NOT skipped),
       (SELECT count(*) FROM ocr_waiting),
       pg_database_size(current_database());

-- name: status_groups
-- Each group with the number of live documents it sees; '' for documents nobody sees.
SELECT coalesce(g, ''), count(*)
FROM documents d LEFT JOIN LATERAL unnest(d.allowed_groups) g ON true
GROUP BY 1 ORDER BY 2 DESC, 1;
