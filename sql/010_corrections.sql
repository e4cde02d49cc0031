-- Employees' corrections of answers, and the learned facts approved ones become.
--
-- A correction is kept by (source_uri, checksum) of the documents whose passages it corrects:
-- document and chunk ids change with every edit and every generation. It is served to nobody
-- until a reviewer approves it. Then each generation holds it as a learned fact (its keyword
-- terms and its vector under that generation's model, and the groups that may see it: those
-- every document it corrects grants, each still indexed with the checksum it was corrected
-- at), which search filters by the caller's groups inside SQL, as it filters chunks.
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

-- The groups that may see each learned fact of generation schema `gen`: those every document
-- its correction corrects grants, none when one of them is missing from that generation or
-- holds other bytes than were corrected. Kept on the fact's row, as a document's groups are
-- on its chunks, and recomputed by the statement that changes the generation's documents
-- (trigger below), so a re-permission narrows a fact in the same transaction.
CREATE OR REPLACE FUNCTION refresh_learned_fact_groups(gen text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($sql$
        WITH sources AS (
            SELECT f.id, d.allowed_groups
            FROM %1$I.learned_facts f
            JOIN public.correction_sources s ON s.correction_id = f.correction_id
            LEFT JOIN %1$I.documents d ON d.source_uri = s.source_uri AND d.checksum = s.checksum
        ), counted AS (
            SELECT id, count(*) AS n, bool_or(allowed_groups IS NULL) AS missing
            FROM sources GROUP BY id
        ), granted AS (
            SELECT id, g, count(*) AS n FROM sources, unnest(allowed_groups) g GROUP BY id, g
        ), every AS (
            SELECT c.id, coalesce(array_agg(g.g ORDER BY g.g)
                                  FILTER (WHERE g.n = c.n AND NOT c.missing), '{}') AS groups
            FROM counted c LEFT JOIN granted g ON g.id = c.id
            GROUP BY c.id
        )
        UPDATE %1$I.learned_facts f SET allowed_groups = every.groups
        FROM every WHERE every.id = f.id AND f.allowed_groups IS DISTINCT FROM every.groups
    $sql$, gen);
END $fn$;

-- Approved corrections whose documents changed or left the live index go back for review, and
-- their facts leave it, in the statement that changed the documents. Returns how many.
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
        DELETE FROM public.learned_facts f USING public.corrections c
        WHERE c.id = f.correction_id AND c.status <> 'approved';
        UPDATE public.index_state SET version = version + 1;
    END IF;
    RETURN retired;
END $$;

-- On every generation's documents (publishing and creating a generation add it): facts follow
-- their documents' groups; in the live generation, changed documents retire corrections.
CREATE OR REPLACE FUNCTION learned_facts_follow_documents() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM public.refresh_learned_fact_groups(TG_TABLE_SCHEMA);
    IF TG_TABLE_SCHEMA = (SELECT 'kb_gen_' || id FROM public.index_generations
                          WHERE state = 'live') THEN
        PERFORM public.retire_stale_corrections();
    END IF;
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
                id             bigint PRIMARY KEY DEFAULT nextval('public.chunk_ids'),
                correction_id  bigint NOT NULL UNIQUE,
                allowed_groups text[] NOT NULL DEFAULT '{}',  -- see refresh_learned_fact_groups
                token_count    integer NOT NULL,
                keywords       tsvector NOT NULL,
                embedding      vector(384) NOT NULL
            );
            CREATE INDEX IF NOT EXISTS learned_facts_keywords_gin ON %1$I.learned_facts
                USING gin (keywords);
            CREATE INDEX IF NOT EXISTS learned_facts_allowed_groups_gin ON %1$I.learned_facts
                USING gin (allowed_groups);
            CREATE OR REPLACE TRIGGER documents_learned_facts
                AFTER INSERT OR UPDATE OR DELETE ON %1$I.documents
                FOR EACH STATEMENT EXECUTE FUNCTION public.learned_facts_follow_documents();
        $sql$, gen);
    END LOOP;
    gen := 'kb_gen_' || (SELECT id FROM index_generations WHERE state = 'live');
    EXECUTE format('CREATE OR REPLACE VIEW public.learned_facts AS SELECT * FROM %I.learned_facts',
                   gen);
END
$$;
