-- Keep each chunk's keyword tsvector inside its row. Stored out of line (TOAST), as most were
-- (~1.8 kB each, beside a 1.5 kB embedding), each of the keyword leg's up to 400 candidates
-- cost a lookup in the TOAST table, and the query had to copy every value once (`|| ''`) so
-- as not to fetch it again for each term. With STORAGE MAIN the other columns leave the row
-- first and the tsvector stays unless the row outgrows a page: at 100k chunks the keyword leg
-- went from ~9 to ~6 ms (bench/search.py). CLUSTER rewrites the existing rows under the new
-- rule (and rebuilds the indexes), in every generation; new generations copy the column's
-- storage (LIKE ... INCLUDING ALL).
DO $$
DECLARE
    chunks regclass;
BEGIN
    FOR chunks IN
        SELECT to_regclass(quote_ident(nspname) || '.chunks') FROM pg_namespace
        WHERE nspname ~ '^kb_gen_[0-9]+$'
          AND to_regclass(quote_ident(nspname) || '.chunks') IS NOT NULL
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN keywords SET STORAGE MAIN', chunks);
        EXECUTE format('CLUSTER %s USING %I', chunks,
                       (SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                        WHERE i.indrelid = chunks AND i.indisprimary));
    END LOOP;
END
$$;
