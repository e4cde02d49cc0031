-- How many passages each access group may read, in each generation: a search plans by the
-- caller's share of the index (sql/queries/search.sql: an exact vector scan for a caller who
-- may read few passages, a keyword candidate budget counted in the caller's own passages).
-- Kept by the statements that insert, re-permission or delete a generation's chunks, in
-- their own transaction, as keyword_df is; keyword_df's row '' holds the number of chunks.
CREATE OR REPLACE FUNCTION count_group_chunks() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changes text := CASE TG_OP
        WHEN 'INSERT' THEN 'SELECT g, 1 AS n FROM added, unnest(allowed_groups) g'
        WHEN 'DELETE' THEN 'SELECT g, -1 AS n FROM removed, unnest(allowed_groups) g'
        ELSE 'SELECT g, 1 AS n FROM added, unnest(allowed_groups) g
              UNION ALL SELECT g, -1 FROM removed, unnest(allowed_groups) g' END;
BEGIN
    -- Rows in group order, and every writer holds the index writers' lock (lock_keyword_stats):
    -- two statements never wait for each other's groups.
    EXECUTE format($sql$
        INSERT INTO %I.group_sizes AS s (group_name, chunks)
        SELECT g, sum(n) FROM (%s) changed GROUP BY g HAVING sum(n) <> 0 ORDER BY g
        ON CONFLICT (group_name) DO UPDATE SET chunks = s.chunks + EXCLUDED.chunks
    $sql$, TG_TABLE_SCHEMA, changes);
    RETURN NULL;
END $$;

-- The triggers of one generation's chunks (creating a generation adds them too, see
-- kb_core/generations.py): one per event, as a transition table exists only for its events.
CREATE OR REPLACE FUNCTION count_group_chunks_of(gen text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($sql$
        CREATE TRIGGER chunks_group_sizes_insert AFTER INSERT ON %1$I.chunks
            REFERENCING NEW TABLE AS added
            FOR EACH STATEMENT EXECUTE FUNCTION public.count_group_chunks();
        CREATE TRIGGER chunks_group_sizes_update AFTER UPDATE ON %1$I.chunks
            REFERENCING NEW TABLE AS added OLD TABLE AS removed
            FOR EACH STATEMENT EXECUTE FUNCTION public.count_group_chunks();
        CREATE TRIGGER chunks_group_sizes_delete AFTER DELETE ON %1$I.chunks
            REFERENCING OLD TABLE AS removed
            FOR EACH STATEMENT EXECUTE FUNCTION public.count_group_chunks();
    $sql$, gen);
END $fn$;

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
            CREATE TABLE %1$I.group_sizes (
                group_name text PRIMARY KEY,
                chunks     bigint NOT NULL
            );
            INSERT INTO %1$I.group_sizes (group_name, chunks)
            SELECT g, count(*) FROM %1$I.chunks, unnest(allowed_groups) g GROUP BY g;
        $sql$, gen);
        PERFORM count_group_chunks_of(gen);
    END LOOP;
    gen := 'kb_gen_' || (SELECT id FROM index_generations WHERE state = 'live');
    EXECUTE format('CREATE VIEW public.group_sizes AS SELECT * FROM %I.group_sizes', gen);
END
$$;
