-- The GIN index over a chunk's keywords alone goes: the index over keywords and groups
-- (014_keywords_groups_gin.sql) serves every search of a term, and since unknown_terms no
-- longer searches for the terms more passages hold than the caller may not read (the common
-- ones, whose postings a search reads whole), no statement is faster through the keywords'
-- own. At 1M chunks (bench/corpus.py; it dropped in a transaction rolled back, the layouts
-- taking turns, 161 questions, three rounds), p50 with it and without: the keyword leg 11.7
-- and 11.9 ms for a caller who may read every passage, 9.9 and 10.0 for a tenth, 16.5 and 16.4
-- for a hundredth; unknown_terms 0.4 and 0.5, 13.5 and 13.5, 3.2 and 3.2; the same passages
-- and terms for every question. Without it a chunk written costs 237 us instead of 392 (2,000
-- chunks inserted again, the GINs' pending lists cleaned, six rounds), its 381 MB are free,
-- and a rebuild builds it no more (28-37 s).
DO $$
DECLARE
    gen text;
BEGIN
    FOR gen IN
        SELECT schemaname FROM pg_indexes
        WHERE schemaname ~ '^kb_gen_[0-9]+$' AND indexname = 'chunks_keywords_gin'
    LOOP
        EXECUTE format('DROP INDEX %I.chunks_keywords_gin', gen);
    END LOOP;
END
$$;
