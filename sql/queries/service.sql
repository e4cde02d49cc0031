-- name: log_query
INSERT INTO query_log (id, caller_kind, caller_subject, groups, question, answer, found,
                       verified, answerer, hits, latency_ms, cached, mode, parts, follows,
                       asked_as, cited_chunks)
VALUES (%(id)s, %(caller_kind)s, %(caller_subject)s, %(groups)s, %(question)s, %(answer)s,
        %(found)s, %(verified)s, %(answerer)s, %(hits)s::jsonb, %(latency_ms)s, %(cached)s,
        %(mode)s, %(parts)s::jsonb, %(follows)s, %(asked_as)s, %(cited_chunks)s);

-- name: conversation
-- The answers a caller's answer ends a chain of, the newest first, at most %(turns)s: each of
-- them the caller's own, so another caller's answer is as unknown as one never given.
WITH RECURSIVE chain AS (
    SELECT id, follows, question, coalesce(asked_as, question) AS asked_as, answer,
           cited_chunks, 1 AS depth
    FROM query_log
    WHERE id = %(id)s AND caller_kind = %(caller_kind)s AND caller_subject = %(caller_subject)s
    UNION ALL
    SELECT q.id, q.follows, q.question, coalesce(q.asked_as, q.question), q.answer,
           q.cited_chunks, c.depth + 1
    FROM chain c JOIN query_log q ON q.id = c.follows
    WHERE c.depth < %(turns)s
      AND q.caller_kind = %(caller_kind)s AND q.caller_subject = %(caller_subject)s
)
SELECT question, asked_as, answer, cited_chunks FROM chain ORDER BY depth;

-- name: log_citations
-- The documents an answer cites (not its learned facts: no document holds them).
INSERT INTO query_citations (query_id, source_uri)
SELECT %(id)s, uri FROM unnest(%(uris)s::text[]) AS uri
ON CONFLICT DO NOTHING;

-- name: add_feedback
-- Only the caller who asked may comment on the answer it got.
INSERT INTO feedback (query_id, helpful, comment)
SELECT id, %(helpful)s, %(comment)s FROM query_log
WHERE id = %(query_id)s AND caller_kind = %(caller_kind)s AND caller_subject = %(caller_subject)s
RETURNING id;

-- name: recent_questions
-- The caller's own latest distinct questions, newest first, each with its latest answer (the
-- conversation the page reopens from it; index query_log_by_caller).
SELECT question, id, created_at FROM (
    SELECT DISTINCT ON (question) question, id, created_at FROM query_log
    WHERE caller_kind = %(caller_kind)s AND caller_subject = %(caller_subject)s
    ORDER BY question, created_at DESC, id
) q
ORDER BY created_at DESC
LIMIT %(limit)s;

-- name: reopen_conversation
-- The caller's conversation that its answer %(id)s ends, the oldest turn first, at most
-- %(turns)s: each answer the caller's own, so another caller's is as unknown as one never given.
-- A turn's answer and the passages it cited come only when every passage it cited is one the
-- caller's groups may read now (a passage that has left the index is not): otherwise NULL, and
-- nothing of those documents leaves the database.
WITH RECURSIVE chain AS (
    SELECT id, follows, question, asked_as, created_at, found, verified, answer, cited_chunks,
           1 AS depth
    FROM query_log
    WHERE id = %(id)s AND caller_kind = %(caller_kind)s AND caller_subject = %(caller_subject)s
    UNION ALL
    SELECT q.id, q.follows, q.question, q.asked_as, q.created_at, q.found, q.verified, q.answer,
           q.cited_chunks, c.depth + 1
    FROM chain c JOIN query_log q ON q.id = c.follows
    WHERE c.depth < %(turns)s
      AND q.caller_kind = %(caller_kind)s AND q.caller_subject = %(caller_subject)s
)
SELECT t.id, t.question, coalesce(t.asked_as, t.question), t.created_at, t.found, t.verified,
       CASE WHEN r.readable THEN t.answer END,
       CASE WHEN r.readable THEN r.passages END
FROM chain t
CROSS JOIN LATERAL (
    SELECT count(c.id) = cardinality(t.cited_chunks) AS readable,
           coalesce(jsonb_agg(jsonb_build_array(u.n, c.id, d.id, d.path, d.title, c.heading,
                                                c.location, c.ocr, c.content) ORDER BY u.n)
                    FILTER (WHERE c.id IS NOT NULL), '[]') AS passages
    FROM unnest(t.cited_chunks) WITH ORDINALITY AS u (chunk_id, n)
    LEFT JOIN chunks c ON c.id = u.chunk_id AND c.allowed_groups && %(groups)s::text[]
    LEFT JOIN documents d ON d.id = c.document_id
) r
ORDER BY t.depth DESC;

-- name: purge_query_log
-- With the knowledge-gap report's question vectors no report has used as long (rowcount: the
-- log's entries).
WITH vectors AS (
    DELETE FROM question_vectors WHERE used_at < now() - make_interval(days => %(days)s)
)
DELETE FROM query_log WHERE created_at < now() - make_interval(days => %(days)s);

-- name: index_version
SELECT version FROM index_state;
