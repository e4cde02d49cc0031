-- The graph leg's lookups (sql/queries/search.sql, graph_leg). For a caller who may read few
-- passages (the exact plan): an entity's mentions that one of the caller's groups may read,
-- found by one key per (entity, group) pair, so the index holds exactly the mentions wanted.
-- Through the entities' index the leg passed every mention of a common entity the caller may
-- not read; through the caller's passages, every mention of them: at 100k passages a caller of
-- a hundredth waited 7 ms at p95 for either, on a 6 ms search.
-- chr(31), the unit separator, is in no entity key (kb_core/entities.py) and no group name.
CREATE FUNCTION entity_in_groups(entity text, readers text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ARRAY(SELECT entity || chr(31) || g FROM unnest(readers) g);

DO $$
DECLARE
    gen text;
BEGIN
    FOR gen IN
        SELECT nspname FROM pg_namespace
        WHERE nspname ~ '^kb_gen_[0-9]+$' AND to_regclass(quote_ident(nspname) || '.mentions') IS NOT NULL
    LOOP
        EXECUTE format(
            'CREATE INDEX mentions_in_groups ON %1$I.mentions USING gin (public.entity_in_groups(entity_key, allowed_groups))',
            gen);
        -- A question's names looked up among the entities known by name alone (the LLM
        -- extractor's): an index of those, empty without it, so that the common entities
        -- the rules know (zp-2041 in thousands of passages) are not passed for each name.
        EXECUTE format(
            'CREATE INDEX mentions_things ON %1$I.mentions (entity_key) INCLUDE (allowed_groups) WHERE kind = ''thing''',
            gen);
    END LOOP;
END
$$;
