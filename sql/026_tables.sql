-- Tables kept as cells (kb_pipeline/parsing/table_cells.py), so that a question about one cell,
-- the largest value of a column or the rows meeting a condition is answered from the cells
-- (kb_search/tables/). They belong to a generation like its passages and leave with them: each
-- row names the passage that holds its text, whose groups decide who may read it (a row is
-- read only joined to its passage, filtered by the caller's groups like every passage).
DO $$
DECLARE
    gen text;
BEGIN
    FOR gen IN
        SELECT nspname FROM pg_namespace
        WHERE nspname ~ '^kb_gen_[0-9]+$' AND to_regclass(quote_ident(nspname) || '.chunks') IS NOT NULL
    LOOP
        EXECUTE format($sql$
            CREATE TABLE %1$I.data_tables (
                document_id bigint NOT NULL,
                table_no    integer NOT NULL,  -- in the document's reading order, from 0
                -- The passage of its first row: the table leaves with its document's passages.
                chunk_id    bigint NOT NULL REFERENCES %1$I.chunks (id) ON DELETE CASCADE,
                location    text,              -- シート: 別表1, スライド 4, p.3
                caption     text NOT NULL,     -- the lines above its header
                columns     text[] NOT NULL,   -- header rows joined top-down: 日当：管理職
                units       text[] NOT NULL,   -- each column's unit, NULL where none is stated
                notes       text[] NOT NULL,   -- the lines under it: 注1 …
                -- What each column measures, as a question writes it: its top header without
                -- what qualifies it in parentheses, NFKC, lower case, no white space
                -- (最大推力 (N) → 最大推力); the tables a question names are found by these.
                heads       text[] NOT NULL,
                PRIMARY KEY (document_id, table_no)
            );
            CREATE INDEX data_tables_chunk ON %1$I.data_tables (chunk_id);
            CREATE TABLE %1$I.table_rows (
                document_id bigint NOT NULL,
                table_no    integer NOT NULL,
                row_no      integer NOT NULL,  -- among its table's data rows, from 0
                chunk_id    bigint NOT NULL REFERENCES %1$I.chunks (id) ON DELETE CASCADE,
                cells       text[] NOT NULL,   -- as the document shows them, one per column
                PRIMARY KEY (document_id, table_no, row_no),
                FOREIGN KEY (document_id, table_no)
                    REFERENCES %1$I.data_tables (document_id, table_no) ON DELETE CASCADE
            );
            CREATE INDEX table_rows_chunk ON %1$I.table_rows (chunk_id);
            -- The chunks stage's placement of each table, waiting for search_index.
            ALTER TABLE IF EXISTS %1$I.staged_documents ADD COLUMN tables jsonb;
        $sql$, gen);
    END LOOP;
    gen := 'kb_gen_' || (SELECT id FROM index_generations WHERE state = 'live');
    EXECUTE format('CREATE VIEW public.data_tables AS SELECT * FROM %I.data_tables', gen);
    EXECUTE format('CREATE VIEW public.table_rows AS SELECT * FROM %I.table_rows', gen);
    EXECUTE format('CREATE OR REPLACE VIEW public.staged_documents AS SELECT * FROM %I.staged_documents', gen);
END
$$;
