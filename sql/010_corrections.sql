-- Employees' corrections of answers, and the learned facts approved ones become.
--
-- A correction is kept by (source_uri, checksum) of the documents whose passages it corrects:
-- document and chunk ids change with every edit and every generation. It is served to nobody
-- until a reviewer approves it. Then each generation holds it as a learned fact (its keyword
-- terms and its vector under that generation's model), and a search sees the fact only where
-- one of the caller's groups is a group of every document it corrects, each still indexed
-- with the checksum it was corrected at (learned_fact_groups, computed inside the search
-- statement, so no stored copy of the groups can lag a re-permission).
CREATE TABLE IF NOT EXISTS corrections (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status         text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'approved', 'rejected', 'retired')),
    correction     text NOT NULL,            -- what the employee says is right
    question       text NOT NULL,            -- copied: the query log is purged, this is not
    answer         text NOT NULL,
    query_id       uuid,                     -- the query log entry it came from, while it lasts
    submitted_kind text NOT NULL,            -- the caller's kind: 'jwt', 'dev', 'token'
    submitted_by   text NOT NULL,            -- the caller's subject
    submitter_name text NOT NULL,
    submitted_at   timestamptz NOT NULL DEFAULT now(),
    reviewed_by    text,                     -- the reviewer's name, cited with the fact
    reviewed_at    timestamptz,
    retired_at     timestamptz,              -- a corrected document changed or left the index
    note           text                      -- why it was retired or rejected
);
CREATE INDEX IF NOT EXISTS corrections_status ON corrections (status);

-- The passages a correction corrects, as they were cited.
CREATE TABLE IF NOT EXISTS correction_sources (
    correction_id bigint NOT NULL REFERENCES corrections (id) ON DELETE CASCADE,
    position      integer NOT NULL,
    source_uri    text NOT NULL,
    checksum      text NOT NULL,             -- the document's SHA-256 the correction holds for
    path          text NOT NULL,
    heading       text NOT NULL,
    passage       text NOT NULL,
    PRIMARY KEY (correction_id, position)
);
CREATE INDEX IF NOT EXISTS correction_sources_source_uri ON correction_sources (source_uri);

-- The groups that may see correction `correction`'s fact: those every document it corrects
-- grants, or none when one of them is missing from the index on the search path (the live
-- generation, or a rebuilt one under evaluation) or holds other bytes than were corrected.
-- Not BEGIN ATOMIC: the body's names are resolved when it runs, on the caller's search path.
CREATE OR REPLACE FUNCTION learned_fact_groups(correction bigint) RETURNS text[]
LANGUAGE sql STABLE AS $$
    WITH sources AS (
        SELECT d.allowed_groups
        FROM correction_sources s
        LEFT JOIN documents d ON d.source_uri = s.source_uri AND d.checksum = s.checksum
        WHERE s.correction_id = correction
    )
    SELECT CASE
        WHEN count(*) = 0 OR bool_or(allowed_groups IS NULL) THEN '{}'::text[]
        ELSE (SELECT coalesce(array_agg(g ORDER BY g), '{}')
              FROM (SELECT DISTINCT unnest(allowed_groups) AS g FROM sources) every
              WHERE NOT EXISTS (SELECT 1 FROM sources s WHERE NOT every.g = ANY(s.allowed_groups)))
    END
    FROM sources
$$;

-- Approved corrections whose documents changed or left the live index go back for review, in
-- the statement that changed them (a trigger on the live generation's documents, added again
-- to each generation when it is published). Returns how many; their facts stop being served
-- at once, because learned_fact_groups already finds no matching document.
CREATE OR REPLACE FUNCTION retire_stale_corrections() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    retired bigint;
BEGIN
    UPDATE public.corrections c
    SET status = 'retired', retired_at = now(),
        note = 'a corrected document changed or was removed'
    WHERE c.status = 'approved' AND EXISTS (
        SELECT 1 FROM public.correction_sources s
        WHERE s.correction_id = c.id AND NOT EXISTS (
            SELECT 1 FROM public.documents d
            WHERE d.source_uri = s.source_uri AND d.checksum = s.checksum));
    GET DIAGNOSTICS retired = ROW_COUNT;
    IF retired > 0 THEN
        UPDATE public.index_state SET version = version + 1;
    END IF;
    RETURN retired;
END $$;

CREATE OR REPLACE FUNCTION retire_stale_corrections_trigger() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM public.retire_stale_corrections();
    RETURN NULL;
END $$;

-- Each generation's learned facts: one row per approved correction, with the generation's
-- keyword terms and embedding model. Ids come from the chunks' sequence, so an id in the query
-- log names one passage or one fact, never both.
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
            CREATE TABLE IF NOT EXISTS %1$I.learned_facts (
                id            bigint PRIMARY KEY DEFAULT nextval('public.chunk_ids'),
                correction_id bigint NOT NULL UNIQUE,
                token_count   integer NOT NULL,
                keywords      tsvector NOT NULL,
                embedding     vector(384) NOT NULL
            );
            CREATE INDEX IF NOT EXISTS learned_facts_keywords_gin ON %1$I.learned_facts
                USING gin (keywords);
        $sql$, gen);
    END LOOP;
    gen := 'kb_gen_' || (SELECT id FROM index_generations WHERE state = 'live');
    EXECUTE format('CREATE OR REPLACE VIEW public.learned_facts AS SELECT * FROM %I.learned_facts',
                   gen);
    EXECUTE format('CREATE OR REPLACE TRIGGER documents_retire_stale_corrections '
                   'AFTER UPDATE OR DELETE ON %I.documents '
                   'FOR EACH STATEMENT EXECUTE FUNCTION public.retire_stale_corrections_trigger()',
                   gen);
END
$$;
