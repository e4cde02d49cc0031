-- One GIN index over a chunk's keywords and its groups in place of the one over its groups
-- alone. A caller who may read a tenth of the index or less has its keyword candidates found
-- by one search of this index, which intersects the terms' postings with its groups' (GIN
-- skips through the longer list), where it took a bitmap of every passage its groups may read
-- (at 1M chunks ~9 ms of each question for a tenth) ANDed with the terms'. The same holds for
-- the answerability's unknown_terms. At 1M chunks (bench/corpus.py; the layouts taking turns,
-- each index dropped in a transaction rolled back after its pass), keyword leg p50: a tenth
-- 49.1 -> 21.8 ms, a hundredth (every passage of its holding a term) 62.5 -> 40.2 ms;
-- unknown_terms p50 125 -> 19 ms and 57 -> 4.4 ms; the same passages for every question. The
-- keywords' own index stays: a term alone (a caller who may read most passages has its groups
-- checked on each row, and unknown_terms for it) costs more through this one (unknown_terms
-- p50 93 -> 165 ms without it). 375 MB at 1M chunks, 373 MB of it the keywords'; built in
-- ~70 s. A generation still being rebuilt has no search index yet: it gets the live one's
-- when its rows are in (kb_core/generations.py, build_search_indexes).
SET LOCAL maintenance_work_mem = '1GB';

DO $$
DECLARE
    gen text;
BEGIN
    FOR gen IN
        SELECT nspname FROM pg_namespace
        WHERE nspname ~ '^kb_gen_[0-9]+$'
          AND to_regclass(quote_ident(nspname) || '.chunks_keywords_gin') IS NOT NULL
    LOOP
        EXECUTE format($sql$
            CREATE INDEX chunks_keywords_groups_gin ON %1$I.chunks
                USING gin (keywords, allowed_groups);
            DROP INDEX IF EXISTS %1$I.chunks_allowed_groups_gin;
        $sql$, gen);
    END LOOP;
END
$$;
