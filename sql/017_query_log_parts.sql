-- Deep mode answers a question part by part: the log keeps each part's sub-question and whether
-- evidence was found for it (what a gap report reads), and the mode the caller asked in.
-- NULL parts: a question answered whole.
ALTER TABLE query_log ADD COLUMN parts jsonb;
ALTER TABLE query_log ADD COLUMN mode text NOT NULL DEFAULT 'auto';
