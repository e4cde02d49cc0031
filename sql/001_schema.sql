-- The search index, the catalogue of known files, the staging area the Dagster assets hand
-- work through, the embedding cache and the record of ingestion failures.
CREATE EXTENSION IF NOT EXISTS vector;

-- What the index was built with: a different embedder is refused rather than mixed in.
CREATE TABLE index_settings (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- Every file the sensor or `kb ingest` registered: one row per Dagster partition.
CREATE TABLE document_sources (
    source_uri      text PRIMARY KEY,        -- absolute path: the partition key
    root            text NOT NULL,           -- the watched folder it was found under
    path            text NOT NULL,           -- relative to root, prefixed with root's name
    fallback_groups text[],                  -- `kb ingest --groups`, for files without a rule
    registered_at   timestamptz NOT NULL DEFAULT now()
);

-- The live index: what searches read.
CREATE TABLE documents (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source_uri       text NOT NULL UNIQUE,
    path             text NOT NULL,
    title            text NOT NULL,
    mime             text NOT NULL,
    size_bytes       bigint NOT NULL,
    checksum         text NOT NULL,          -- SHA-256 of the file's bytes
    pipeline_version text NOT NULL,          -- parser, chunker and embedding model versions
    allowed_groups   text[] NOT NULL DEFAULT '{}',
    access_rule      text,                   -- where the groups came from; NULL: visible to nobody
    revision_date    date,
    revision_source  text NOT NULL,          -- 'document' (stated in it) or 'mtime'
    file_mtime       timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    ingested_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE chunks (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id    bigint NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    chunk_index    integer NOT NULL,
    heading        text NOT NULL,
    location       text,                     -- 'p.3', 'シート: 日当', 'スライド 2'
    content        text NOT NULL,            -- the passage as written: what a citation quotes
    search_text    text NOT NULL,            -- 【title】heading + content: what is embedded and searched
    token_count    integer NOT NULL,
    text_sha256    text NOT NULL,
    allowed_groups text[] NOT NULL,          -- the document's, so a filtered vector scan needs no join
    embedding      vector(384) NOT NULL,
    keywords       tsvector NOT NULL,        -- NFKC-normalized 2-grams and whole codes
    UNIQUE (document_id, chunk_index)
);
CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops);
CREATE INDEX chunks_keywords_gin ON chunks USING gin (keywords);
CREATE INDEX chunks_allowed_groups_gin ON chunks USING gin (allowed_groups);

-- A chunk text embedded once is never embedded again by the same model.
CREATE TABLE embedding_cache (
    model       text NOT NULL,
    text_sha256 text NOT NULL,
    embedding   vector NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, text_sha256)
);

-- Work in flight between the assets of one run: raw -> parsed -> chunks. The live index is
-- touched only by search_index, so a failure on the way leaves the last good version searchable.
CREATE TABLE staged_documents (
    source_uri       text PRIMARY KEY,
    checksum         text NOT NULL,
    size_bytes       bigint NOT NULL,
    file_mtime       timestamptz NOT NULL,
    pipeline_version text NOT NULL,
    allowed_groups   text[] NOT NULL,
    access_rule      text,
    parsed           jsonb,
    chunks           jsonb,
    embedded         boolean NOT NULL DEFAULT false,
    run_id           text NOT NULL,          -- the run that staged it; a later run takes it over
    staged_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE ingestion_failures (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source_uri  text NOT NULL,
    path        text NOT NULL,
    checksum    text,
    stage       text NOT NULL,               -- the asset that failed
    pipeline_version text NOT NULL,
    error       text NOT NULL,
    run_id      text,
    failed_at   timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz                  -- set when a later ingest of the file succeeds
);
CREATE INDEX ingestion_failures_open ON ingestion_failures (source_uri) WHERE resolved_at IS NULL;
