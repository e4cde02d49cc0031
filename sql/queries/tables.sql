-- name: documents_naming_tables
-- The documents whose tables the caller may read have a column the question names (by its
-- head, sql/026_tables.sql): the table leg, for a table whose passages the search did not
-- rank among the first. Filtered by the caller's groups before anything else is read.
SELECT DISTINCT t.document_id
FROM data_tables t
JOIN chunks c ON c.id = t.chunk_id
WHERE c.allowed_groups && %(groups)s::text[]
  AND EXISTS (SELECT 1 FROM unnest(t.heads) h WHERE length(h) >= 2 AND strpos(%(question)s, h) > 0)
ORDER BY t.document_id
LIMIT %(limit)s;

-- name: tables_of_documents
-- The tables of the documents a search found (kb_search/tables/), each with its rows that the
-- caller may read: a row is read through its passage, whose groups are the document's.
SELECT t.document_id, t.table_no, d.title, d.path, t.location, t.caption, t.columns, t.units,
       t.notes, array_agg(r.row_no ORDER BY r.row_no), array_agg(r.chunk_id ORDER BY r.row_no),
       jsonb_agg(to_jsonb(r.cells) ORDER BY r.row_no)
FROM data_tables t
JOIN documents d ON d.id = t.document_id
JOIN table_rows r ON r.document_id = t.document_id AND r.table_no = t.table_no
JOIN chunks c ON c.id = r.chunk_id
WHERE t.document_id = ANY(%(documents)s::bigint[]) AND c.allowed_groups && %(groups)s::text[]
GROUP BY t.document_id, t.table_no, d.title, d.path, t.location, t.caption, t.columns, t.units,
         t.notes
ORDER BY t.document_id, t.table_no;
