-- The knowledge graph (docs/knowledge-graph.md): which entities each passage names, and the
-- references it makes between them. Both belong to a generation like its passages and leave
-- with them. An entity, a mention or a reference exists for a caller only through a passage
-- the caller may read: a mention carries its passage's groups (changed with them, in the same
-- statement, as the passage's vectors are), so the graph leg reads the mentions of an entity
-- the caller may read from one index without visiting the passages; a reference is read only
-- from passages already found readable.
DO $$
DECLARE
    gen text;
BEGIN
    FOR gen IN
        SELECT nspname FROM pg_namespace
        WHERE nspname ~ '^kb_gen_[0-9]+$' AND to_regclass(quote_ident(nspname) || '.chunks') IS NOT NULL
    LOOP
        EXECUTE format($sql$
            CREATE TABLE %1$I.mentions (
                entity_key text NOT NULL,  -- the normalised name: the id in every generation
                chunk_id   bigint NOT NULL REFERENCES %1$I.chunks (id) ON DELETE CASCADE,
                kind       text NOT NULL,  -- code, document, article, unit, role
                name       text NOT NULL,  -- as the passage first wrote it
                allowed_groups text[] NOT NULL,  -- the passage's
                PRIMARY KEY (entity_key, chunk_id)
            );
            -- An entity's readable mentions, from the index alone: at 10k passages a caller who
            -- may read a tenth waited 36 ms (p95) for the passages' groups, row by row.
            CREATE INDEX mentions_entity_groups ON %1$I.mentions (entity_key)
                INCLUDE (chunk_id, kind, allowed_groups);
            CREATE INDEX mentions_chunk ON %1$I.mentions (chunk_id);
            -- An entity card is looked up by a prefix of its name.
            CREATE INDEX mentions_key_prefix ON %1$I.mentions (entity_key text_pattern_ops);
            CREATE TABLE %1$I.relations (
                source_key text NOT NULL,
                target_key text NOT NULL,
                kind       text NOT NULL,  -- row: one table row names both; reference: one sentence refers
                chunk_id   bigint NOT NULL REFERENCES %1$I.chunks (id) ON DELETE CASCADE,
                PRIMARY KEY (source_key, target_key, kind, chunk_id)
            );
            CREATE INDEX relations_target ON %1$I.relations (target_key);
            CREATE INDEX relations_chunk ON %1$I.relations (chunk_id);
            -- The entity_graph stage's output, waiting for search_index.
            ALTER TABLE IF EXISTS %1$I.staged_documents ADD COLUMN graph jsonb;
        $sql$, gen);
    END LOOP;
    gen := 'kb_gen_' || (SELECT id FROM index_generations WHERE state = 'live');
    EXECUTE format('CREATE VIEW public.mentions AS SELECT * FROM %I.mentions', gen);
    EXECUTE format('CREATE VIEW public.relations AS SELECT * FROM %I.relations', gen);
    EXECUTE format('CREATE OR REPLACE VIEW public.staged_documents AS SELECT * FROM %I.staged_documents', gen);
END
$$;
