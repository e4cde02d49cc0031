-- What the knowledge-gap report counts beside the query log.
--
-- The documents each answer cites, by source_uri (chunk and document ids change with every
-- edit and every generation), so "cited often" and "never cited" can be counted; purged with
-- the answer's log entry. Answers logged before this migration record none: the report counts
-- citations from the moment it was applied (schema_migrations.applied_at).
CREATE TABLE query_citations (
    query_id   uuid NOT NULL REFERENCES query_log (id) ON DELETE CASCADE,
    source_uri text NOT NULL,
    PRIMARY KEY (query_id, source_uri)
);
CREATE INDEX query_citations_source_uri ON query_citations (source_uri);

-- The catalogue's checksum history: a row each time a document is indexed with other bytes
-- than before, in any generation, so a file copied again or touched without a change keeps the
-- age of its content. `since` is the file's modification time then (never later than the
-- indexing): when its content took that form, as far as anything here can tell.
CREATE TABLE content_history (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source_uri text NOT NULL,
    checksum   text NOT NULL,
    since      timestamptz NOT NULL,
    indexed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX content_history_latest ON content_history (source_uri, id DESC);

-- What is indexed now is the history's first row: its content is as old as its file says.
INSERT INTO content_history (source_uri, checksum, since, indexed_at)
SELECT source_uri, checksum, least(file_mtime, ingested_at), ingested_at FROM documents;

-- The report's question vectors, kept so each question is embedded once, not at every reading
-- (about 15 ms each on two cores). Keyed by the question's normalized text's SHA-256; a vector
-- is derived from an employee's question, so it goes with the query log's retention, counted
-- from the last report that used it.
CREATE TABLE question_vectors (
    model       text NOT NULL,
    text_sha256 text NOT NULL,
    embedding   vector NOT NULL,
    used_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, text_sha256)
);
