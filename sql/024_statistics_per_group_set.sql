-- The keyword statistics counted per set of allowed groups, so that a search weighs terms by
-- the passages its caller may read and nothing else (docs/security.md, "The rule").
-- Counted over the whole index, a term's document frequency told an all-employees caller
-- whether a salary code occurred in hr's documents: its weight moved the fused score, the order
-- of hits and the found / not-found decision.
--
-- Each passage belongs to one canonical set of groups (sorted, distinct; group_sets), and a
-- company has few distinct sets. keyword_df holds each term's document frequency per set, the
-- term '' the number of passages, and set 0 the sums over every set. A caller's figure is the
-- sum over the sets its groups meet, or set 0 less the sets they do not meet, whichever reads
-- fewer rows (sql/queries/search.sql, search_scope): exact either way.
--
-- Kept by statement triggers on each generation's chunks, in the writing transaction: inserting,
-- deleting (a document's chunks, cascading from it) and re-permissioning passages all move them.
-- Every writer holds the index writers' lock (lock_keyword_stats) and writes its rows in key
-- order: two statements never wait for each other's rows.

CREATE FUNCTION canonical_groups(groups text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ARRAY(SELECT DISTINCT g FROM unnest(groups) g ORDER BY g);

CREATE FUNCTION count_passage_terms() RETURNS trigger
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
            SELECT s.id AS set_id, c.keywords, c.n
            FROM (%2$s) c
            JOIN %1$I.group_sets s ON s.groups = public.canonical_groups(c.allowed_groups)
        ), per_set AS (
            SELECT set_id, u.lexeme AS term, sum(n) AS n FROM changed, unnest(keywords) u
            GROUP BY 1, 2
            UNION ALL
            SELECT set_id, '', sum(n) FROM changed GROUP BY 1
        )
        INSERT INTO %1$I.keyword_df AS k (term, set_id, df)
        SELECT term, set_id, n FROM (
            SELECT term, set_id, n FROM per_set
            UNION ALL
            SELECT term, 0, sum(n) FROM per_set GROUP BY term
        ) t
        WHERE n <> 0
        ORDER BY term, set_id
        ON CONFLICT (term, set_id) DO UPDATE SET df = k.df + EXCLUDED.df
    $sql$, TG_TABLE_SCHEMA, changes);
    RETURN NULL;
END $$;

-- The triggers of one generation's chunks (creating a generation adds them too, see
-- kb_core/generations.py): one per event, as a transition table exists only for its events.
CREATE FUNCTION count_passage_terms_of(gen text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($sql$
        CREATE TRIGGER chunks_terms_insert AFTER INSERT ON %1$I.chunks
            REFERENCING NEW TABLE AS added
            FOR EACH STATEMENT EXECUTE FUNCTION public.count_passage_terms();
        CREATE TRIGGER chunks_terms_update AFTER UPDATE ON %1$I.chunks
            REFERENCING NEW TABLE AS added OLD TABLE AS removed
            FOR EACH STATEMENT EXECUTE FUNCTION public.count_passage_terms();
        CREATE TRIGGER chunks_terms_delete AFTER DELETE ON %1$I.chunks
            REFERENCING OLD TABLE AS removed
            FOR EACH STATEMENT EXECUTE FUNCTION public.count_passage_terms();
    $sql$, gen);
END $fn$;

CREATE SEQUENCE group_set_ids AS integer;

DROP VIEW public.group_sizes;
DROP VIEW public.keyword_df;

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
            -- IF EXISTS: a generation begun before earlier migrations may lack them.
            DROP TRIGGER IF EXISTS chunks_group_sizes_insert ON %1$I.chunks;
            DROP TRIGGER IF EXISTS chunks_group_sizes_update ON %1$I.chunks;
            DROP TRIGGER IF EXISTS chunks_group_sizes_delete ON %1$I.chunks;
            DROP TABLE IF EXISTS %1$I.group_sizes;
            DROP TABLE IF EXISTS %1$I.keyword_df;
            -- Set ids come from one sequence: a new generation's table (LIKE ... INCLUDING
            -- ALL) draws from it too, and no id is 0.
            CREATE TABLE %1$I.group_sets (
                id     integer PRIMARY KEY DEFAULT nextval('public.group_set_ids'),
                groups text[] NOT NULL UNIQUE
            );
            CREATE INDEX group_sets_groups ON %1$I.group_sets USING gin (groups);
            CREATE TABLE %1$I.keyword_df (
                term   text NOT NULL,
                set_id integer NOT NULL,
                df     integer NOT NULL,
                PRIMARY KEY (term, set_id)
            );
            INSERT INTO %1$I.group_sets (groups)
            SELECT DISTINCT canonical_groups(allowed_groups) FROM %1$I.chunks ORDER BY 1;
            WITH per_set AS (
                SELECT s.id AS set_id, u.lexeme AS term, count(*) AS n
                FROM %1$I.chunks c
                JOIN %1$I.group_sets s ON s.groups = canonical_groups(c.allowed_groups),
                     unnest(c.keywords) u
                GROUP BY 1, 2
                UNION ALL
                SELECT s.id, '', count(*)
                FROM %1$I.chunks c
                JOIN %1$I.group_sets s ON s.groups = canonical_groups(c.allowed_groups)
                GROUP BY 1
            )
            INSERT INTO %1$I.keyword_df (term, set_id, df)
            SELECT term, set_id, n FROM per_set
            UNION ALL
            SELECT term, 0, sum(n) FROM per_set GROUP BY term;
        $sql$, gen);
        PERFORM count_passage_terms_of(gen);
    END LOOP;
    gen := 'kb_gen_' || (SELECT id FROM index_generations WHERE state = 'live');
    EXECUTE format('CREATE VIEW public.group_sets AS SELECT * FROM %I.group_sets', gen);
    EXECUTE format('CREATE VIEW public.keyword_df AS SELECT * FROM %I.keyword_df', gen);
END
$$;

DROP FUNCTION count_group_chunks_of(text);
DROP FUNCTION count_group_chunks();
