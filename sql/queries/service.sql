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
-- The caller's own latest distinct questions, newest first (index query_log_by_caller).
SELECT question FROM (
    SELECT question, max(created_at) AS asked_at FROM query_log
    WHERE caller_kind = %(caller_kind)s AND caller_subject = %(caller_subject)s
    GROUP BY question
) q
ORDER BY asked_at DESC
LIMIT %(limit)s;

-- name: purge_query_log
-- With the knowledge-gap report's question vectors no report has used as long (rowcount: the
-- log's entries).
WITH vectors AS (
    DELETE FROM question_vectors WHERE used_at < now() - make_interval(days => %(days)s)
)
DELETE FROM query_log WHERE created_at < now() - make_interval(days => %(days)s);

-- name: index_version
SELECT version FROM index_state;
