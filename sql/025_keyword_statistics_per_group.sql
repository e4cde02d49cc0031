-- The keyword statistics also counted per group, so that a search reads one row per term and
-- group of its caller instead of one per set of groups it meets (sql/024): with 10,000 sets, a
-- caller meeting 1,000 of them read 8,000 rows for a question of 18 terms, and every search
-- compared every set with its groups; its p95 went from 18 to 50 ms at 100k passages.
--
-- keyword_df_by_group holds each term's document frequency among the passages one group may
-- read, the term '' their number. A passage of several of the caller's groups must count once:
-- search_scope (sql/queries/search.sql) takes the caller's group of most passages whole, and
-- from each other group only its sets that no group before it meets, read from keyword_df
-- (those sets, or the group's figure less the others, whichever are fewer). Exact, as before.
-- It replaces keyword_df's set 0 (the sums over every set), which nothing needs now.
--
-- Kept by the same statement triggers as keyword_df, in the same statement.

CREATE OR REPLACE FUNCTION count_passage_terms() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    -- An update that changes neither a passage's groups nor its terms changes no figure.
    moved text := 'SELECT a.id FROM added a JOIN removed r ON r.id = a.id
                   WHERE canonical_groups(a.allowed_groups)
                             IS DISTINCT FROM canonical_groups(r.allowed_groups)
                      OR a.keywords IS DISTINCT FROM r.keywords';
    changes text := CASE TG_OP
        WHEN 'INSERT' THEN 'SELECT allowed_groups, keywords, 1 AS n FROM added'
        WHEN 'DELETE' THEN 'SELECT allowed_groups, keywords, -1 AS n FROM removed'
        ELSE format('SELECT allowed_groups, keywords, 1 AS n FROM added WHERE id IN (%1$s)
                     UNION ALL
                     SELECT allowed_groups, keywords, -1 FROM removed WHERE id IN (%1$s)', moved)
        END;
BEGIN
    EXECUTE format($sql$
        INSERT INTO %1$I.group_sets AS s (groups)
        SELECT DISTINCT public.canonical_groups(allowed_groups) FROM (%2$s) c ORDER BY 1
        ON CONFLICT (groups) DO NOTHING
    $sql$, TG_TABLE_SCHEMA, changes);
    EXECUTE format($sql$
        WITH changed AS (
            SELECT s.id AS set_id, s.groups, c.keywords, c.n
            FROM (%2$s) c
            JOIN %1$I.group_sets s ON s.groups = public.canonical_groups(c.allowed_groups)
        ), per_set AS MATERIALIZED (
            SELECT set_id, groups, u.lexeme AS term, sum(n) AS n
            FROM changed, unnest(keywords) u
            GROUP BY 1, 2, 3
            UNION ALL
            SELECT set_id, groups, '', sum(n) FROM changed GROUP BY 1, 2
        ), by_set AS (
            INSERT INTO %1$I.keyword_df AS k (term, set_id, df)
            SELECT term, set_id, n FROM per_set WHERE n <> 0
            ORDER BY term, set_id
            ON CONFLICT (term, set_id) DO UPDATE SET df = k.df + EXCLUDED.df
        )
        INSERT INTO %1$I.keyword_df_by_group AS k (term, group_name, df)
        SELECT term, g, sum(n) FROM per_set, unnest(groups) g
        GROUP BY 1, 2 HAVING sum(n) <> 0
        ORDER BY term, g
        ON CONFLICT (term, group_name) DO UPDATE SET df = k.df + EXCLUDED.df
    $sql$, TG_TABLE_SCHEMA, changes);
    RETURN NULL;
END $$;

DO $$
DECLARE
    gen text;
BEGIN
    FOR gen IN
        SELECT nspname FROM pg_namespace
        WHERE nspname ~ '^kb_gen_[0-9]+$'
          AND to_regclass(quote_ident(nspname) || '.keyword_df') IS NOT NULL
    LOOP
        EXECUTE format($sql$
            DELETE FROM %1$I.keyword_df WHERE set_id = 0;
            CREATE TABLE %1$I.keyword_df_by_group (
                term       text NOT NULL,
                group_name text NOT NULL,
                df         integer NOT NULL,
                PRIMARY KEY (term, group_name)
            );
            INSERT INTO %1$I.keyword_df_by_group (term, group_name, df)
            SELECT d.term, g, sum(d.df)
            FROM %1$I.keyword_df d JOIN %1$I.group_sets s ON s.id = d.set_id, unnest(s.groups) g
            GROUP BY 1, 2;
        $sql$, gen);
    END LOOP;
    gen := 'kb_gen_' || (SELECT id FROM index_generations WHERE state = 'live');
    EXECUTE format('CREATE VIEW public.keyword_df_by_group AS SELECT * FROM %I.keyword_df_by_group',
                   gen);
END
$$;
