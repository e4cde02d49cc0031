-- name: document_for_caller
-- A document's metadata, only when one of its groups is the caller's: a document outside
-- them is indistinguishable from one that does not exist.
SELECT d.id, d.path, d.title, d.mime, d.size_bytes, d.revision_date, d.ingested_at,
       (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunks
FROM documents d
WHERE d.id = %(id)s AND d.allowed_groups && %(groups)s::text[];

-- name: passages_around_chunk
-- The passage `chunk_id` of document `id` and its neighbours, each filtered by the caller's
-- groups like search is; `ocr` when a passage's page was read from a scan.
SELECT c.id AS chunk_id, c.chunk_index, c.heading, c.location AS page, c.ocr, c.content,
       c.id = %(chunk_id)s AS cited
FROM chunks target
JOIN chunks c ON c.document_id = target.document_id
             AND c.chunk_index BETWEEN target.chunk_index - %(around)s
                                   AND target.chunk_index + %(around)s
WHERE target.id = %(chunk_id)s AND target.document_id = %(id)s
  AND target.allowed_groups && %(groups)s::text[]
  AND c.allowed_groups && %(groups)s::text[]
ORDER BY c.chunk_index;

-- name: document_original_for_caller
-- Where the original of a document the caller may read lives, and the checksum indexed.
SELECT d.source_uri, d.path, d.checksum, d.size_bytes
FROM documents d
WHERE d.id = %(id)s AND d.allowed_groups && %(groups)s::text[];
