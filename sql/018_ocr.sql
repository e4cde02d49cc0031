-- Scanned documents (docs/ocr.md). A page read by OCR is kept by its pixels' digest, the
-- engine (its version and models) and resolution, so a rebuild reads no page again and a
-- changed page alone is read again; it is shared by every generation.
CREATE TABLE ocr_pages (
    image_sha256 text NOT NULL,
    engine       text NOT NULL,
    dpi          integer NOT NULL,
    text         text NOT NULL,              -- as the engine gave it; '' when it found none
    confidence   real,                       -- mean word confidence, 0-100; NULL without words
    vertical     boolean NOT NULL,           -- 縦書き
    rotation     integer NOT NULL,           -- the clockwise turn that righted the page
    seconds      real NOT NULL,
    read_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (image_sha256, engine, dpi)
);

-- Documents whose pages wait for the OCR step (not failures: their last good version, if any,
-- stays searchable). The folder sensor launches that step for them and ingests them again
-- once it has read their pages.
CREATE TABLE ocr_waiting (
    source_uri text PRIMARY KEY,
    checksum   text NOT NULL,
    pages      integer NOT NULL,
    unread     integer NOT NULL,
    reason     text NOT NULL,
    since      timestamptz NOT NULL DEFAULT now()
);

-- A document with no text anywhere (a blank scan) is skipped, and says why; it is no error.
ALTER TABLE ingestion_failures ADD COLUMN skipped boolean NOT NULL DEFAULT false;

-- Which passages came from OCR: a citation says so (its text may hold misread characters).
DO $$
DECLARE
    gen text;
BEGIN
    FOR gen IN
        SELECT nspname FROM pg_namespace
        WHERE nspname ~ '^kb_gen_[0-9]+$' AND to_regclass(quote_ident(nspname) || '.chunks') IS NOT NULL
    LOOP
        EXECUTE format('ALTER TABLE %I.chunks ADD COLUMN ocr boolean NOT NULL DEFAULT false', gen);
    END LOOP;
    gen := 'kb_gen_' || (SELECT id FROM index_generations WHERE state = 'live');
    EXECUTE format('CREATE OR REPLACE VIEW public.chunks AS SELECT * FROM %I.chunks', gen);
END
$$;
