-- The entity cards (kb_search/entity_cards.py). An entity exists for a caller only through
-- passages the caller may read: each statement joins chunks.allowed_groups, and counts,
-- names and relations come from those passages alone.

-- name: entities_named
-- Entities whose normalised name is `key` or starts with it, the exact one first, then those
-- named in most passages.
SELECT m.entity_key, min(m.kind), mode() WITHIN GROUP (ORDER BY m.name),
       count(*) AS passages, count(DISTINCT c.document_id) AS documents
FROM mentions m
JOIN chunks c ON c.id = m.chunk_id
WHERE m.entity_key LIKE %(prefix)s AND c.allowed_groups && %(groups)s::text[]
GROUP BY m.entity_key
ORDER BY m.entity_key = %(key)s DESC, count(*) DESC, m.entity_key
LIMIT %(limit)s;

-- name: entity_mentions
-- The passages naming an entity, by document, the documents naming it most first, with what
-- each says of it (the LLM extractor's description; NULL from the rules).
SELECT d.id, d.source_uri, d.path, d.title, c.id, c.heading, c.location, c.ocr, m.kind,
       m.name, m.description
FROM mentions m
JOIN chunks c ON c.id = m.chunk_id
JOIN documents d ON d.id = c.document_id
WHERE m.entity_key = %(key)s AND c.allowed_groups && %(groups)s::text[]
ORDER BY count(*) OVER (PARTITION BY d.id) DESC, d.path, c.chunk_index
LIMIT %(limit)s;

-- name: entity_relations
-- The entities named with it in the caller's passages: how many passages name both, which
-- references they make between the two (a table row, 「〜による」), and the first passages as
-- evidence, those that make a reference first, and what those passages say of the relation
-- (the LLM extractor's descriptions, the first `evidence` of them).
WITH own AS (
    SELECT m.chunk_id FROM mentions m JOIN chunks c ON c.id = m.chunk_id
    WHERE m.entity_key = %(key)s AND c.allowed_groups && %(groups)s::text[]
), together AS (
    SELECT o.entity_key, o.kind, o.name, o.chunk_id,
           ARRAY(SELECT DISTINCT r.kind FROM relations r
                 WHERE r.chunk_id = o.chunk_id
                   AND ((r.source_key = %(key)s AND r.target_key = o.entity_key)
                     OR (r.source_key = o.entity_key AND r.target_key = %(key)s))
                 ORDER BY r.kind) AS refs,
           ARRAY(SELECT r.description FROM relations r
                 WHERE r.chunk_id = o.chunk_id AND r.description IS NOT NULL
                   AND ((r.source_key = %(key)s AND r.target_key = o.entity_key)
                     OR (r.source_key = o.entity_key AND r.target_key = %(key)s))
                 ORDER BY r.description) AS said
    FROM own JOIN mentions o ON o.chunk_id = own.chunk_id AND o.entity_key <> %(key)s
), referred AS (
    SELECT t.entity_key, array_agg(DISTINCT k ORDER BY k) AS kinds
    FROM together t CROSS JOIN unnest(t.refs) k
    GROUP BY t.entity_key
), described AS (
    SELECT t.entity_key, (array_agg(DISTINCT d ORDER BY d))[1:%(evidence)s] AS descriptions
    FROM together t CROSS JOIN unnest(t.said) d
    GROUP BY t.entity_key
)
SELECT t.entity_key, min(t.kind), mode() WITHIN GROUP (ORDER BY t.name), count(*) AS passages,
       coalesce(min(r.kinds), '{}'),
       (array_agg(t.chunk_id ORDER BY cardinality(t.refs) = 0, t.chunk_id))[1:%(evidence)s],
       coalesce(min(s.descriptions), '{}')
FROM together t
LEFT JOIN referred r ON r.entity_key = t.entity_key
LEFT JOIN described s ON s.entity_key = t.entity_key
GROUP BY t.entity_key
ORDER BY min(r.kinds) IS NULL, count(*) DESC, t.entity_key
LIMIT %(limit)s;

-- name: entity_evidence
SELECT c.id, d.id, d.path, d.title, c.heading, c.location, c.ocr
FROM chunks c JOIN documents d ON d.id = c.document_id
WHERE c.id = ANY(%(ids)s::bigint[]) AND c.allowed_groups && %(groups)s::text[];

-- name: entities_known
-- Which of these entities the caller's passages name (an answer's links to their cards).
SELECT DISTINCT m.entity_key
FROM mentions m JOIN chunks c ON c.id = m.chunk_id
WHERE m.entity_key = ANY(%(keys)s::text[]) AND c.allowed_groups && %(groups)s::text[];
