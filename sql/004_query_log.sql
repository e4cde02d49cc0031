-- The query log (questions can hold personal data: purged after a configured retention),
-- feedback on answers, and a version of the index that changes whenever documents do, so an
-- answer cache knows when it is stale.
CREATE TABLE query_log (
    id             uuid PRIMARY KEY,
    created_at     timestamptz NOT NULL DEFAULT now(),
    caller_kind    text NOT NULL,            -- 'token', 'jwt' or 'cli'
    caller_subject text NOT NULL,
    groups         text[] NOT NULL,
    question       text NOT NULL,
    answer         text NOT NULL,
    found          boolean NOT NULL,
    verified       boolean NOT NULL,
    answerer       text NOT NULL,
    hits           jsonb NOT NULL,           -- [{chunk_id, path, score}] in rank order
    latency_ms     real NOT NULL,
    cached         boolean NOT NULL DEFAULT false
);
CREATE INDEX query_log_created_at ON query_log (created_at);

CREATE TABLE feedback (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    query_id   uuid NOT NULL REFERENCES query_log (id) ON DELETE CASCADE,
    helpful    boolean NOT NULL,
    comment    text,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE index_state (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version   bigint NOT NULL
);
INSERT INTO index_state (version) VALUES (0);

CREATE FUNCTION bump_index_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE index_state SET version = version + 1;
    RETURN NULL;
END $$;

-- Statement-level: one bump per statement, whether it touches one document or many.
CREATE TRIGGER documents_change_index_version
AFTER INSERT OR UPDATE OR DELETE ON documents
FOR EACH STATEMENT EXECUTE FUNCTION bump_index_version();
