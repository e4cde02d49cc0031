-- name: generations
SELECT id, pipeline_version, state, created_at, build_rounds, evaluated_at, published_at,
       evaluation, note
FROM index_generations ORDER BY id;

-- name: generation_lock
-- Creating, publishing and discarding generations take turns.
SELECT pg_advisory_xact_lock(72190003);

-- name: adopt_pipeline_version
-- The first index (or an empty one) is built with whatever pipeline runs: nothing to gate.
UPDATE index_generations SET pipeline_version = %(version)s
WHERE state = 'live'
  AND (pipeline_version IS NULL OR NOT EXISTS (SELECT 1 FROM public.documents))
  AND pipeline_version IS DISTINCT FROM %(version)s;

-- name: generation_of_version
-- A generation already built, building or refused for this pipeline version: a failed or
-- discarded one is not rebuilt by itself (`kb generation rebuild` asks for another).
SELECT id FROM index_generations
WHERE pipeline_version = %(version)s AND state <> 'retired'
ORDER BY id DESC LIMIT 1;

-- name: insert_generation
INSERT INTO index_generations (id, pipeline_version, state)
SELECT coalesce(max(id), 0) + 1, %(version)s, 'building' FROM index_generations
RETURNING id;

-- name: generation_round_launched
UPDATE index_generations SET build_rounds = build_rounds + 1 WHERE id = %(id)s;

-- name: generation_state_of
SELECT state FROM index_generations WHERE id = %(id)s;

-- name: generation_try_claim
-- Whether no other session drives this generation's rebuild (`kb generation rebuild` holds the
-- lock while it runs); a successful try is released at once.
SELECT CASE WHEN pg_try_advisory_lock(72190004, %(id)s)
            THEN pg_advisory_unlock(72190004, %(id)s)
            ELSE false END;

-- name: generation_claim
SELECT pg_advisory_lock(72190004, %(id)s);

-- name: generation_release
SELECT pg_advisory_unlock(72190004, %(id)s);

-- name: candidate_only_documents
-- Documents of the candidate (first on the search path) that the live generation lacks, with
-- the access they were indexed with.
SELECT c.source_uri, c.allowed_groups, c.access_rule FROM documents c
WHERE NOT EXISTS (SELECT 1 FROM public.documents l WHERE l.source_uri = c.source_uri);

-- name: catalogue_sources
SELECT source_uri FROM document_sources ORDER BY source_uri;

-- name: generation_state
UPDATE index_generations SET state = %(state)s, note = %(note)s WHERE id = %(id)s;

-- name: generation_evaluated
UPDATE index_generations
SET state = %(state)s, evaluation = %(evaluation)s::jsonb, evaluated_at = now(), note = %(note)s
WHERE id = %(id)s AND state IN ('building', 'evaluating', 'passed', 'failed');

-- name: generation_coverage
-- Documents the live generation serves that the candidate (first on the search path) lacks.
SELECT l.path FROM public.documents l
WHERE NOT EXISTS (SELECT 1 FROM documents c WHERE c.source_uri = l.source_uri)
ORDER BY l.path;

-- name: generation_forgotten
-- Documents of the candidate whose files left the catalogue while it was being built.
SELECT source_uri FROM documents d
WHERE NOT EXISTS (SELECT 1 FROM document_sources s WHERE s.source_uri = d.source_uri);

-- name: delete_documents
DELETE FROM documents WHERE source_uri = ANY(%(uris)s);

-- name: generation_copy_access
-- Access rules edited while the candidate was built were applied to the live documents only:
-- the candidate takes the live groups, so publishing never restores a revoked group.
WITH live AS (
    SELECT source_uri, allowed_groups, access_rule FROM public.documents
), docs AS (
    UPDATE documents d SET allowed_groups = live.allowed_groups, access_rule = live.access_rule
    FROM live
    WHERE live.source_uri = d.source_uri
      AND (d.allowed_groups, d.access_rule) IS DISTINCT FROM (live.allowed_groups, live.access_rule)
    RETURNING d.id, d.allowed_groups
), passages AS (
    UPDATE chunks c SET allowed_groups = docs.allowed_groups
    FROM docs WHERE c.document_id = docs.id
    RETURNING c.id, c.allowed_groups
), mentioned AS (
    UPDATE mentions m SET allowed_groups = passages.allowed_groups
    FROM passages WHERE m.chunk_id = passages.id
)
UPDATE chunk_vectors v SET allowed_groups = passages.allowed_groups
FROM passages WHERE v.chunk_id = passages.id;

-- name: retire_live_generation
UPDATE index_generations SET state = 'retired' WHERE state = 'live' RETURNING id;

-- name: make_generation_live
UPDATE index_generations SET state = 'live', published_at = now(), note = NULL WHERE id = %(id)s;

-- name: bump_index_version
UPDATE index_state SET version = version + 1;

-- name: search_indexes
-- The indexes of a generation's chunks and embedding views that no constraint needs: the
-- HNSW graph and the GIN indexes searches read (kb_core/generations.py builds them once
-- over a rebuilt generation's rows).
SELECT c.relname, pg_get_indexdef(i.indexrelid)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = %(schema)s AND t.relname IN ('chunks', 'chunk_vectors')
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
ORDER BY t.relname, c.relname;
