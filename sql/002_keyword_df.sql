-- Document frequency of each keyword term over all chunks, for IDF weighting in the keyword
-- leg. The row with the empty term ('') holds the number of chunks. Maintained in the same
-- transaction that replaces or removes a document's chunks.
CREATE TABLE keyword_df (
    term text PRIMARY KEY,
    df   integer NOT NULL
);

INSERT INTO keyword_df (term, df)
SELECT lexeme, count(*) FROM chunks, unnest(keywords) GROUP BY lexeme;
INSERT INTO keyword_df (term, df) SELECT '', count(*) FROM chunks;
