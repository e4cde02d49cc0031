-- The knowledge-gap report's reads (kb_search/gap_report.py). %(groups)s is the reviewer's
-- groups, or NULL for the operator at the shell, who sees everything.

-- name: gap_questions
-- Questions asked since %(since)s that no document answered, whole or in a part, or whose answer
-- an employee marked unhelpful: only those whose asker's every group is one of the reviewer's.
-- `parts`: the sub-questions searched and not found (a multi-part question is a gap part by
-- part); `hits`: the passages it retrieved, in rank order. A follow-up is its question as
-- searched (「年次有給休暇について、半日単位は？」, not 「半日単位は？」): what it asked.
SELECT question, not_found, parts, unhelpful, hits
FROM (
    SELECT coalesce(q.asked_as, q.question) AS question,
           NOT q.found AND q.parts IS NULL AS not_found,
           ARRAY(SELECT p->>'question' FROM jsonb_array_elements(q.parts) WITH ORDINALITY x (p, n)
                 WHERE NOT (p->>'found')::boolean AND coalesce((p->>'searched')::boolean, true)
                 ORDER BY n) AS parts,
           EXISTS (SELECT 1 FROM feedback f WHERE f.query_id = q.id AND NOT f.helpful)
               AS unhelpful,
           q.hits, q.created_at
    FROM query_log q
    WHERE q.created_at >= %(since)s
      AND (%(groups)s::text[] IS NULL OR q.groups <@ %(groups)s::text[])
) q
WHERE not_found OR cardinality(parts) > 0 OR unhelpful
ORDER BY created_at;

-- name: readable_documents_at
-- The documents at `paths` the reviewer may read, with their first passage.
SELECT d.path, d.id, d.title,
       (SELECT c.id FROM chunks c WHERE c.document_id = d.id ORDER BY c.chunk_index LIMIT 1)
FROM documents d
WHERE d.path = ANY(%(paths)s)
  AND (%(groups)s::text[] IS NULL OR d.allowed_groups && %(groups)s::text[]);

-- name: passages_at
-- Which of `chunks` are still indexed, with their document's path.
SELECT c.id, d.path FROM chunks c JOIN documents d ON d.id = c.document_id
WHERE c.id = ANY(%(chunks)s);

-- name: citations_since
-- When answers began recording what they cite.
SELECT applied_at FROM schema_migrations WHERE name = '020_gap_report.sql';

-- name: stale_documents
-- Documents the reviewer may read, cited since %(since)s, whose content is unchanged since
-- before %(unchanged_before)s by the checksum history; most cited first.
WITH cited AS (
    SELECT c.source_uri, count(*) AS cited
    FROM query_citations c JOIN query_log q ON q.id = c.query_id
    WHERE q.created_at >= %(since)s
    GROUP BY c.source_uri
)
SELECT d.id, d.path, d.title, cited.cited, h.since,
       (SELECT c.id FROM chunks c WHERE c.document_id = d.id ORDER BY c.chunk_index LIMIT 1)
FROM documents d
JOIN cited USING (source_uri)
JOIN LATERAL (SELECT since FROM content_history
              WHERE source_uri = d.source_uri ORDER BY id DESC LIMIT 1) h ON true
WHERE h.since < %(unchanged_before)s
  AND (%(groups)s::text[] IS NULL OR d.allowed_groups && %(groups)s::text[])
ORDER BY cited.cited DESC, d.path;

-- name: uncited_documents
-- Documents the reviewer may read, in the catalogue since before %(since)s, that no answer
-- has cited since.
SELECT d.id, d.path, d.title, s.registered_at,
       (SELECT c.id FROM chunks c WHERE c.document_id = d.id ORDER BY c.chunk_index LIMIT 1)
FROM documents d
JOIN document_sources s USING (source_uri)
WHERE s.registered_at < %(since)s
  AND NOT EXISTS (SELECT 1 FROM query_citations c JOIN query_log q ON q.id = c.query_id
                  WHERE c.source_uri = d.source_uri AND q.created_at >= %(since)s)
  AND (%(groups)s::text[] IS NULL OR d.allowed_groups && %(groups)s::text[])
ORDER BY d.path;

-- name: question_vectors
-- The vectors kept of these questions, marked used now.
UPDATE question_vectors SET used_at = now()
WHERE model = %(model)s AND text_sha256 = ANY(%(shas)s)
RETURNING text_sha256, embedding::real[];

-- name: keep_question_vectors
INSERT INTO question_vectors (model, text_sha256, embedding)
SELECT %(model)s, sha, embedding
FROM unnest(%(shas)s::text[], %(embeddings)s::vector[]) AS v (sha, embedding)
ON CONFLICT DO NOTHING;
