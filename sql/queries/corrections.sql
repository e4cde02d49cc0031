-- name: logged_answer
-- The question and answer of a query this caller asked (only its own can be corrected).
SELECT question, answer, hits FROM query_log
WHERE id = %(query_id)s AND caller_kind = %(caller_kind)s AND caller_subject = %(caller_subject)s;

-- name: readable_passages
-- The passages among `chunk_ids` that the caller's groups may read now, with their
-- document's identity across edits and generations.
SELECT c.id, d.source_uri, d.checksum, d.path, c.heading, c.content
FROM chunks c JOIN documents d ON d.id = c.document_id
WHERE c.id = ANY(%(chunk_ids)s) AND c.allowed_groups && %(groups)s::text[];

-- name: insert_correction
INSERT INTO corrections (correction, question, answer, query_id, submitted_kind, submitted_by,
                         submitter_name)
VALUES (%(correction)s, %(question)s, %(answer)s, %(query_id)s, %(kind)s, %(subject)s,
        %(name)s)
RETURNING id;

-- name: insert_correction_source
INSERT INTO correction_sources (correction_id, position, source_uri, checksum, path, heading,
                                passage)
VALUES (%(correction_id)s, %(position)s, %(source_uri)s, %(checksum)s, %(path)s, %(heading)s,
        %(passage)s);

-- name: corrections_to_review
-- Corrections awaiting a decision (new ones, and approved ones retired because a document
-- they correct changed), oldest first. With `groups`, only those whose every document is in
-- the live index and readable by one of the groups: a reviewer reads what it may read.
SELECT c.id, c.status, c.correction, c.question, c.answer, c.submitter_name, c.submitted_at,
       c.reviewed_by, c.reviewed_at, c.retired_at, c.note
FROM corrections c
WHERE c.status IN ('pending', 'retired')
  AND (%(groups)s::text[] IS NULL OR NOT EXISTS (
      SELECT 1 FROM correction_sources s
      WHERE s.correction_id = c.id AND NOT EXISTS (
          SELECT 1 FROM documents d
          WHERE d.source_uri = s.source_uri AND d.allowed_groups && %(groups)s::text[])))
ORDER BY c.submitted_at, c.id;

-- name: correction_sources_of
-- Each corrected passage, and whether its document is indexed now with other bytes (changed)
-- or not at all (gone).
SELECT s.correction_id, s.path, s.heading, s.passage,
       d.source_uri IS NOT NULL AND d.checksum <> s.checksum AS changed,
       d.source_uri IS NULL AS gone
FROM correction_sources s
LEFT JOIN documents d ON d.source_uri = s.source_uri
WHERE s.correction_id = ANY(%(ids)s)
ORDER BY s.correction_id, s.position;

-- name: decisions_wait_for_publication
-- A decision waits for a publication in progress (generation_lock) and holds it off: the live
-- generation holds the facts of approved corrections only, and publishing one checks its own.
-- Taken before any row lock, which a publication may need (retire_stale_corrections).
SELECT pg_advisory_xact_lock_shared(72190003);

-- name: lock_correction
SELECT status, question, correction FROM corrections WHERE id = %(id)s FOR UPDATE;

-- name: rekey_correction_sources
-- An approval holds for the documents as they are indexed now.
UPDATE correction_sources s SET checksum = d.checksum
FROM documents d
WHERE s.correction_id = %(id)s AND d.source_uri = s.source_uri AND d.checksum <> s.checksum;

-- name: correction_documents_missing
-- How many documents the correction corrects are not in the live index.
SELECT count(*) FROM correction_sources s
WHERE s.correction_id = %(id)s
  AND NOT EXISTS (SELECT 1 FROM documents d WHERE d.source_uri = s.source_uri);

-- name: correction_readable_by
-- Whether every document the correction corrects is readable by one of `groups`.
SELECT NOT EXISTS (
    SELECT 1 FROM correction_sources s
    WHERE s.correction_id = %(id)s AND NOT EXISTS (
        SELECT 1 FROM documents d
        WHERE d.source_uri = s.source_uri AND d.allowed_groups && %(groups)s::text[]));

-- name: decide_correction
UPDATE corrections
SET status = %(status)s, reviewed_by = %(reviewer)s, reviewed_at = now(), note = %(note)s,
    retired_at = NULL
WHERE id = %(id)s;

-- name: learned_fact_texts
-- Approved corrections without a learned fact in the generation on the search path, with the
-- text that is embedded and searched for them.
SELECT c.id, c.question, c.correction FROM corrections c
WHERE c.status = 'approved'
  AND NOT EXISTS (SELECT 1 FROM learned_facts f WHERE f.correction_id = c.id)
ORDER BY c.id;

-- name: insert_learned_fact
INSERT INTO learned_facts (correction_id, token_count, keywords, embedding)
VALUES (%(correction_id)s, %(token_count)s, %(keywords)s::tsvector, %(embedding)s)
ON CONFLICT (correction_id) DO NOTHING;

-- name: drop_unapproved_facts
-- Learned facts of corrections no longer approved (rejected, retired) leave the generation.
DELETE FROM learned_facts f
WHERE NOT EXISTS (SELECT 1 FROM corrections c WHERE c.id = f.correction_id
                                                AND c.status = 'approved');

-- name: retire_stale_corrections
SELECT retire_stale_corrections();

-- name: refresh_learned_fact_groups
-- The groups of the learned facts of the generation on the search path (its schema, or the
-- live generation's views in public).
SELECT refresh_learned_fact_groups(current_schema());

-- name: correction_counts
-- For the learned_facts asset: corrections by status, and the facts of the generation on the
-- search path, with those no caller can see (a corrected document changed, or the documents
-- share no group).
SELECT (SELECT count(*) FROM corrections WHERE status = 'pending'),
       (SELECT count(*) FROM corrections WHERE status = 'approved'),
       (SELECT count(*) FROM corrections WHERE status = 'rejected'),
       (SELECT count(*) FROM corrections WHERE status = 'retired'),
       (SELECT count(*) FROM learned_facts f JOIN corrections c ON c.id = f.correction_id
        WHERE c.status = 'approved'),
       (SELECT count(*) FROM learned_facts f JOIN corrections c ON c.id = f.correction_id
        WHERE c.status = 'approved' AND f.allowed_groups = '{}');

-- name: corrections_changed_at
-- When corrections last changed: the learned_facts sensor's cursor.
SELECT greatest(max(submitted_at), max(reviewed_at), max(retired_at))::text FROM corrections;
