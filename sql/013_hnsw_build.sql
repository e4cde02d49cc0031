-- Every generation's HNSW graph rebuilt with m 24 and ef_construction 128 (pgvector's
-- defaults, 16 and 64, before). At 100k chunks (bench/corpus.py) an unfiltered caller's vector
-- recall@10 against exact search went from 0.912 to 0.958 at ef_search 200 (0.982 at 400),
-- where a wider search alone could not make up for the sparser graph (0.943 at ef_search 800);
-- a caller who may read a tenth of the index went from 0.958 to 0.990. The price is the
-- build: 137 s instead of 44 s at 100k chunks on two busy cores, the index the same 333 MB.
-- Upgrading rebuilds the graph once, here; a new generation copies these parameters with its
-- tables (LIKE ... INCLUDING ALL).
SET LOCAL maintenance_work_mem = '1GB';  -- a graph that fits is built several times faster

DO $$
DECLARE
    gen text;
BEGIN
    FOR gen IN
        SELECT nspname FROM pg_namespace
        WHERE nspname ~ '^kb_gen_[0-9]+$'
          AND to_regclass(quote_ident(nspname) || '.chunk_vectors') IS NOT NULL
    LOOP
        EXECUTE format($sql$
            DROP INDEX %1$I.chunk_vectors_embedding_hnsw;
            CREATE INDEX chunk_vectors_embedding_hnsw ON %1$I.chunk_vectors
                USING hnsw (embedding vector_cosine_ops) WITH (m = 24, ef_construction = 128);
        $sql$, gen);
    END LOOP;
END
$$;
