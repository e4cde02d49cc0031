-- Index generations. The index tables (documents, chunks, keyword_df, index_settings and the
-- staging area) of each generation live in a schema of their own, kb_gen_<id>; the names in
-- public are views onto the live generation, so readers and document-by-document writers need
-- no change, and publishing a rebuilt generation replaces the views in one transaction.
CREATE TABLE index_generations (
    id               integer PRIMARY KEY,
    pipeline_version text,                   -- what it is built with; NULL until first adopted
    state            text NOT NULL CHECK (state IN
                         ('building', 'evaluating', 'passed', 'failed', 'live', 'retired',
                          'discarded')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    build_rounds     integer NOT NULL DEFAULT 0,  -- rounds of rebuild runs launched so far
    evaluated_at     timestamptz,
    published_at     timestamptz,
    evaluation       jsonb,                  -- the gate's figures, kept for failed ones too
    note             text                    -- why it failed, or who discarded it
);
-- One live generation at any moment.
CREATE UNIQUE INDEX index_generations_one_live ON index_generations ((true)) WHERE state = 'live';

CREATE SCHEMA kb_gen_1;
ALTER TABLE documents SET SCHEMA kb_gen_1;
ALTER TABLE chunks SET SCHEMA kb_gen_1;
ALTER TABLE keyword_df SET SCHEMA kb_gen_1;
ALTER TABLE index_settings SET SCHEMA kb_gen_1;
ALTER TABLE staged_documents SET SCHEMA kb_gen_1;

-- One sequence per id for all generations, so a chunk id never names two passages (the query
-- log and feedback keep chunk ids) even though generations are built side by side.
CREATE SEQUENCE document_ids;
CREATE SEQUENCE chunk_ids;
SELECT setval('document_ids', coalesce((SELECT max(id) FROM kb_gen_1.documents), 0) + 1, false);
SELECT setval('chunk_ids', coalesce((SELECT max(id) FROM kb_gen_1.chunks), 0) + 1, false);
ALTER TABLE kb_gen_1.documents ALTER COLUMN id DROP IDENTITY;
ALTER TABLE kb_gen_1.documents ALTER COLUMN id SET DEFAULT nextval('public.document_ids');
ALTER TABLE kb_gen_1.chunks ALTER COLUMN id DROP IDENTITY;
ALTER TABLE kb_gen_1.chunks ALTER COLUMN id SET DEFAULT nextval('public.chunk_ids');

CREATE VIEW documents AS SELECT * FROM kb_gen_1.documents;
CREATE VIEW chunks AS SELECT * FROM kb_gen_1.chunks;
CREATE VIEW keyword_df AS SELECT * FROM kb_gen_1.keyword_df;
CREATE VIEW index_settings AS SELECT * FROM kb_gen_1.index_settings;
CREATE VIEW staged_documents AS SELECT * FROM kb_gen_1.staged_documents;

INSERT INTO index_generations (id, state, published_at) VALUES (1, 'live', now());
