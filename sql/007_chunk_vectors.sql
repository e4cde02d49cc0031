-- A chunk's vectors leave its row for a table of their own: a long chunk is embedded as
-- several views (its head line and a part of about a paragraph each, the unit e5 was trained
-- on), and the vector leg finds a chunk by its best view. Each generation gets the table,
-- filled with the one vector each of its chunks has now, so the live index keeps answering
-- as before until the rebuild the new chunker version starts embeds the views.
DROP VIEW chunks;  -- it names chunks.embedding, which goes

DO $$
DECLARE
    gen text;
BEGIN
    FOR gen IN
        SELECT nspname FROM pg_namespace
        WHERE nspname ~ '^kb_gen_[0-9]+$'
          AND to_regclass(quote_ident(nspname) || '.chunks') IS NOT NULL
    LOOP
        EXECUTE format($sql$
            CREATE TABLE %1$I.chunk_vectors (
                chunk_id       bigint NOT NULL REFERENCES %1$I.chunks (id) ON DELETE CASCADE,
                view_index     integer NOT NULL,
                allowed_groups text[] NOT NULL,  -- the chunk's: a filtered scan needs no join
                embedding      vector(384) NOT NULL,
                PRIMARY KEY (chunk_id, view_index)
            );
            INSERT INTO %1$I.chunk_vectors (chunk_id, view_index, allowed_groups, embedding)
            SELECT id, 0, allowed_groups, embedding FROM %1$I.chunks;
            CREATE INDEX chunk_vectors_embedding_hnsw ON %1$I.chunk_vectors
                USING hnsw (embedding vector_cosine_ops);
            CREATE INDEX chunk_vectors_allowed_groups_gin ON %1$I.chunk_vectors
                USING gin (allowed_groups);
            ALTER TABLE %1$I.chunks DROP COLUMN embedding;
        $sql$, gen);
    END LOOP;
    gen := 'kb_gen_' || (SELECT id FROM index_generations WHERE state = 'live');
    EXECUTE format('CREATE VIEW public.chunks AS SELECT * FROM %I.chunks', gen);
    EXECUTE format('CREATE VIEW public.chunk_vectors AS SELECT * FROM %I.chunk_vectors', gen);
END
$$;
