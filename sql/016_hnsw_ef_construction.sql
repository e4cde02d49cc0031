-- Every generation's HNSW graph rebuilt with ef_construction 256 (128 since migration 013, m
-- still 24). At 1M chunks (bench/corpus.py, 20 questions, ef_search 400) vector recall@10
-- against exact search went from 0.915 to 0.995 for a caller who may read every passage and
-- from 0.925 to 0.960 for one who may read a tenth, whose misses no wider search had mended
-- (0.930 at ef_search 800); vector p50 10.9 -> 11.8 ms and 20.0 -> 20.1, in two runs an hour
-- apart in which the exact plan, which reads no graph, went 16.2 -> 17.4. The price is the
-- build: 1,259 s instead of 833 at 1M on two cores, the graph the same 3.3 GB. Upgrading
-- rebuilds the graph once, here (a generation still being rebuilt has none yet, and copies
-- the live one's when its rows are in).
SET LOCAL maintenance_work_mem = '1GB';  -- a graph that fits is built several times faster

DO $$
DECLARE
    gen text;
BEGIN
    FOR gen IN
        SELECT schemaname FROM pg_indexes
        WHERE schemaname ~ '^kb_gen_[0-9]+$' AND indexname = 'chunk_vectors_embedding_hnsw'
    LOOP
        EXECUTE format($sql$
            DROP INDEX %1$I.chunk_vectors_embedding_hnsw;
            CREATE INDEX chunk_vectors_embedding_hnsw ON %1$I.chunk_vectors
                USING hnsw (embedding vector_cosine_ops) WITH (m = 24, ef_construction = 256);
        $sql$, gen);
    END LOOP;
END
$$;
