-- name: search_scope
-- What the caller may read, counted by the keyword statistics (sql/024, sql/025), so that
-- nothing it may not read moves a figure (docs/security.md): `readable`, its passages, and
-- `dfs`, the document frequency of each of the question's terms among them. The caller's
-- groups that label passages are taken the most read first. The first counts its passages
-- (keyword_df_by_group, a row per term); each later group adds the passages of its sets of
-- groups that no earlier group meets: summed over those sets (keyword_df), or its own figure
-- less the sets an earlier group meets, whichever reads fewer sets. Exact either way, and a
-- row per term for a caller of one group, or of groups one within another (all-employees and
-- a team whose documents all-employees may read too); before, a caller meeting 1,000 of
-- 10,000 sets read 8,000 rows. All in this one statement, so one snapshot: the keyword leg, a
-- statement after it, is given them. Few enough passages, and both legs compare every one
-- (`exact`; kb_search/search.py, EXACT_PASSAGES).
-- And which of the question's names (kb_core.entities.name_candidates) are entities known by
-- name alone (the LLM extractor's `thing`s, kb_pipeline/graph_llm.py) that one of the
-- caller's passages names, for the graph leg to start from: asked here, through an index of
-- those alone (sql/023), it costs a search no round trip (a statement of its own took 0.4 ms
-- of every search at 100k passages), and without the extractor no lookup. The names come as
-- one string, separated by chr(31): as a list, psycopg took 0.4 ms to send 400 of them.
WITH caller AS MATERIALIZED (
    SELECT name, rank, coalesce(array_agg(name) OVER (ORDER BY rank ROWS BETWEEN UNBOUNDED
                                                      PRECEDING AND 1 PRECEDING), '{}') AS earlier
    FROM (SELECT g.group_name AS name, row_number() OVER (ORDER BY g.df DESC, g.group_name) AS rank
          FROM keyword_df_by_group g
          WHERE g.term = '' AND g.df > 0 AND g.group_name = ANY(%(groups)s::text[])) g
), later AS MATERIALIZED (  -- a later group's sets, and whether an earlier group meets them
    SELECT l.rank, s.id, s.groups && l.earlier AS met
    FROM caller l JOIN group_sets s ON s.groups @> ARRAY[l.name]
    WHERE l.rank > 1
), sides AS MATERIALIZED (  -- `less`: the group's own figure less its sets met, the fewer
    SELECT rank, count(*) FILTER (WHERE met) < count(*) FILTER (WHERE NOT met) AS less
    FROM later GROUP BY rank
), counts AS (  -- term '' counts the passages
    SELECT term, sum(df) AS df FROM (
        SELECT g.term, g.df
        FROM caller c JOIN keyword_df_by_group g
          ON g.group_name = c.name AND g.term = ANY(array_prepend('', %(terms)s::text[]))
        WHERE c.rank = 1 OR c.rank IN (SELECT rank FROM sides WHERE less)
        UNION ALL
        SELECT d.term, CASE WHEN s.less THEN -d.df ELSE d.df END
        FROM later l JOIN sides s ON s.rank = l.rank AND s.less = l.met
        -- OFFSET 0 keeps this a lookup by set through keyword_df's key: joined freely, a plan
        -- read every set's rows of the terms (73,000 with 10,000 sets) to keep 1,230 sets'.
        CROSS JOIN LATERAL (SELECT d.term, d.df FROM keyword_df d
                            WHERE d.set_id = l.id
                              AND d.term = ANY(array_prepend('', %(terms)s::text[]))
                            OFFSET 0) d
    ) t
    GROUP BY term
), readable AS (
    SELECT coalesce((SELECT df FROM counts WHERE term = ''), 0)::bigint AS n
)
SELECT r.n AS readable,
       ARRAY(SELECT coalesce(c.df, 0)::bigint
             FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS t (term, n)
             LEFT JOIN counts c ON c.term = t.term ORDER BY t.n) AS dfs,
       r.n <= %(exact_passages)s AS exact,
       ARRAY(SELECT n.name FROM unnest(string_to_array(%(names)s, chr(31))) n (name)
             -- Checked once: without the extractor, no name is looked up.
             WHERE EXISTS (SELECT 1 FROM mentions WHERE kind = 'thing')
               AND EXISTS (SELECT 1 FROM mentions m
                           WHERE m.entity_key = n.name AND m.kind = 'thing'
                             AND m.allowed_groups && %(groups)s::text[])) AS things
FROM readable r;

-- name: vector_leg
-- The caller's passages nearest the question's vector, filtered by its groups before ranking.
-- A chunk is found by its nearest embedding view (a long chunk has several, see
-- sql/007_chunk_vectors.sql): the nearest views, then each chunk once at its best distance.
-- A caller who may read few passages (`exact`, from search_scope) gets them all compared
-- (through the GIN index on allowed_groups): exact, and faster than an HNSW scan that must walk
-- past the many passages it may not read. Only one of the two branches runs: each is gated by a
-- parameter that PostgreSQL checks once, before it starts the branch. The statement has one
-- plan for every question and caller (kb_search/search.py): `IS TRUE` keeps the groups' index
-- out of the HNSW branch, which a plan not knowing the groups would otherwise take, and the
-- views read are a constant: a plan not knowing a LIMIT expects a tenth of the rows, and at 1M
-- chunks it sorted all 1.7M views (2.7 s) instead of walking the graph. 40 views, for at most
-- 40 chunks (a chunk's views are near one another: 25 for the median question on the samples'
-- index): the graph's first batch of ef_search (400) candidates holds about 40 views that a
-- caller who may read a tenth of them may read, where 50 or 60 took a second batch. At 1M
-- chunks, side by side, that caller's hybrid p50 went 20.0 -> 17.1 ms with 40 instead of 60
-- (vector leg 15.7 -> 12.8), the others' the same; the samples' figures are the same to the
-- fourth decimal in every mode and for answers, JaQuAD's hybrid R@1 0.9057 -> 0.9054 (one
-- question of 3,138). Before, 100 views had given the same figures as 60 on both sets, and
-- cost that caller 4.7 ms at 100k.
-- Approved corrections (learned facts, sql/010_corrections.sql) the caller may see, one of its
-- groups being a group of every document the fact corrects, are few and compared exactly.
WITH nearest AS (
    (SELECT v.chunk_id, v.embedding <=> %(query_vector)s::vector AS distance
     FROM chunk_vectors v
     WHERE (v.allowed_groups && %(groups)s::text[]) IS TRUE
       AND NOT %(exact)s::bool
     ORDER BY v.embedding <=> %(query_vector)s::vector
     LIMIT 40)
    UNION ALL
    -- `+ 0`: an expression the HNSW index cannot order by, so none of its approximation.
    (SELECT v.chunk_id, v.embedding <=> %(query_vector)s::vector
     FROM chunk_vectors v
     WHERE v.allowed_groups && %(groups)s::text[]
       AND %(exact)s::bool
     ORDER BY (v.embedding <=> %(query_vector)s::vector) + 0
     LIMIT 40)
    UNION ALL
    (SELECT f.id, f.embedding <=> %(query_vector)s::vector FROM learned_facts f
     WHERE f.allowed_groups && %(groups)s::text[]
     ORDER BY 2 LIMIT 40)
)
-- Whether each holds every code of the question (ZP-2041, 第22条; the fusion gives it a rank-1
-- share), looked up by its id: a code's 2-grams can be in tens of thousands of passages (第14条
-- in 29k of 1M), and finding those through the keywords index first took 300 ms.
SELECT b.id, 1 - b.distance AS similarity,
       CASE WHEN %(code_query)s::tsquery IS NOT NULL
            THEN coalesce((SELECT keywords FROM chunks WHERE id = b.id),
                          (SELECT keywords FROM learned_facts WHERE id = b.id))
                 @@ %(code_query)s::tsquery
            ELSE false END AS coded
FROM (SELECT chunk_id AS id, min(distance) AS distance FROM nearest GROUP BY chunk_id
      ORDER BY 2, 1 LIMIT %(vector_limit)s) b
ORDER BY b.distance, b.id;

-- name: keyword_leg
-- The caller's passages that best match the question's informative 2-grams, filtered by its
-- groups before ranking: BM25 with a bonus for adjacent 2-grams, each passage's coverage of the
-- question's informative term weight, and whether it holds every code of the question.
-- Every figure below counts the caller's passages alone, as search_scope read them: a term's
-- document frequency `dfs` among them, `readable` of them in all.
-- A prefix term (寮:*) has no figure of its own: counted as in none.
WITH RECURSIVE given AS (
    SELECT t.term, t.weight, t.prefix, t.phrase, CASE WHEN t.prefix THEN 0 ELSE t.df END AS df
    FROM unnest(%(terms)s::text[], %(weights)s::float8[], %(prefixes)s::bool[],
                %(phrase_ids)s::int[], %(dfs)s::bigint[])
         AS t (term, weight, prefix, phrase, df)
), q AS (
    SELECT t.term, t.weight, t.prefix, t.phrase, t.df,
           (quote_literal(t.term) || CASE WHEN t.prefix THEN ':*' ELSE '' END)::tsquery AS query,
           t.df::float8 / greatest(%(readable)s::float8, %(share_base)s) AS share,
           ln(1 + (%(readable)s::float8 - t.df + 0.5) / (t.df + 0.5)) AS idf
    FROM given t
),
-- The informative terms: the most telling few, leaving out those in most passages (です, する;
-- a share of at least share_base passages, kb_search/search.py SHARE_BASE) unless no other
-- term is in one.
informative AS (
    SELECT * FROM q
    WHERE share <= %(max_share)s
       OR NOT EXISTS (SELECT 1 FROM q WHERE share <= %(max_share)s AND df > 0)
    ORDER BY weight * idf DESC
    LIMIT %(max_terms)s
),
-- Candidates come from the rarest informative terms, taken while their document frequencies
-- add up to at most max_candidates (the rarest always): a passage that holds none of them
-- could not outscore one that does by much, and a question full of common words then costs no
-- more than one of rare words.
seeds AS (
    SELECT query, df FROM (
        SELECT query, df, sum(df) OVER (ORDER BY idf DESC, term) AS running FROM informative
    ) ranked
    WHERE running - df < %(max_candidates)s
),
-- When the seeds are in more of the caller's passages than max_candidates (even the rarest
-- informative term is that common), which of them are scored decides what the leg finds:
-- taken as they came, at 100k passages its top 10 held a fifth of the 10 best (keyword recall
-- in bench/search.py). They are taken in tiers instead: first the passages holding 4 of the
-- question's 5 weightiest informative terms, then 3, then 2 (each tier one GIN search for the
-- OR of every such combination), then any seed's: recall 0.60 for +4 ms (6 terms: 0.63 for
-- +7 ms; 8: 0.59, +29 ms), and for a caller who may read a tenth of the index 0.84 -> 0.97
-- for +9 ms.
weightiest AS (
    SELECT query::text AS term, row_number() OVER (ORDER BY weight * idf DESC, term) AS n
    FROM informative
    WHERE (SELECT sum(df) FROM seeds) > %(max_candidates)s
    ORDER BY weight * idf DESC, term
    LIMIT 5
),
combinations (n, query, size) AS (
    SELECT n, term, 1 FROM weightiest
    UNION ALL
    SELECT w.n, c.query || ' & ' || w.term, c.size + 1
    FROM combinations c JOIN weightiest w ON w.n > c.n
    WHERE c.size < 4
),
-- The tiers in order, each with the query of the one before, whose passages it leaves out;
-- the seeds last (alone when the question has a rare term).
tiers AS MATERIALIZED (
    SELECT size, query, lag(query) OVER (ORDER BY size DESC) AS above
    FROM (SELECT size, string_agg('(' || query || ')', ' | ')::tsquery AS query
          FROM combinations WHERE size >= 2 GROUP BY size
          UNION ALL
          SELECT 1, string_agg(query::text, ' | ')::tsquery FROM seeds) t
    ORDER BY size DESC
),
-- MATERIALIZED: built once, not again for every candidate that the phrase bonus looks at.
phrase_queries AS MATERIALIZED (
    SELECT (%(phrases)s::tsquery[])[phrase + 1] AS query, sum(weight * idf) AS weight
    FROM q WHERE phrase IS NOT NULL
    GROUP BY phrase
),
candidates AS (
    -- The tsvectors are stored inside their rows (006_inline_keywords.sql), so each term
    -- below reads them in place; out of line, each use would fetch the value again.
    -- The tiers in turn: once max_candidates have come, the later ones do not run. A caller
    -- who may read many passages has its groups checked on each row a tier's terms find (`IS
    -- TRUE` keeps the groups out of the index search); for one who may read fewer, one search
    -- of the index on keywords and groups intersects the groups' postings with the terms',
    -- sparing the rows it may not read (sql/014: at 1M chunks, for a tenth, 49.1 -> 21.8 ms
    -- against two indexes' bitmaps ANDed). Only one of the two runs (kb_search/search.py,
    -- WIDE_PASSAGES); both take the first rows in the table's order, the same ones.
    (SELECT c.id, c.keywords, c.token_count
     FROM tiers t
     CROSS JOIN LATERAL (
         (SELECT c.id, c.keywords, c.token_count FROM chunks c
          WHERE c.keywords @@ t.query AND NOT coalesce(c.keywords @@ t.above, false)
            AND (c.allowed_groups && %(groups)s::text[]) IS TRUE
            AND %(readable)s >= %(wide_passages)s
          LIMIT %(max_candidates)s)
         UNION ALL
         (SELECT c.id, c.keywords, c.token_count FROM chunks c
          WHERE c.keywords @@ t.query AND NOT coalesce(c.keywords @@ t.above, false)
            AND c.allowed_groups && %(groups)s::text[]
            AND %(readable)s < %(wide_passages)s
          LIMIT %(max_candidates)s)) c
     WHERE NOT %(exact)s::bool
     LIMIT %(max_candidates)s)
    UNION ALL
    -- A caller who may read few passages has every one holding an informative term scored,
    -- found by one search of the GIN index on keywords and groups (sql/014): at 1M chunks,
    -- for a hundredth, 62.5 -> 40.2 ms against reading every passage of its through an index
    -- on the groups alone and matching them.
    (SELECT c.id, c.keywords, c.token_count FROM chunks c
     WHERE c.allowed_groups && %(groups)s::text[]
       AND %(exact)s::bool
       AND c.keywords @@ (SELECT string_agg(query::text, ' | ')::tsquery FROM informative))
    UNION ALL
    -- Approved corrections the caller may see (sql/010_corrections.sql): few rows.
    (SELECT f.id, f.keywords, f.token_count FROM learned_facts f
     WHERE f.allowed_groups && %(groups)s::text[]
       AND f.keywords @@ (SELECT string_agg(query::text, ' | ')::tsquery FROM seeds)
     LIMIT %(max_candidates)s)
)
SELECT k.id, t.score + coalesce(p.bonus, 0) AS score, t.coverage,
       coalesce(k.keywords @@ %(code_query)s::tsquery, false) AS coded
FROM candidates k
-- BM25, k1 = 1.2, b = 0.3 against a typical chunk of 250 tokens; a term's count enters
-- through ts_rank, which for one term sums its occurrences as 1, 1/4, 1/9, ... and so
-- saturates by itself (divided by its value for one occurrence: from 1 up to 1.64).
-- Coverage is how much of the question's informative weight the passage contains:
-- evidence for "not found" that, unlike a fused score, means the same from question to
-- question.
CROSS JOIN LATERAL (
    SELECT sum(i.weight * i.idf * ts_rank('{1,1,1,1}', k.keywords, i.query, 0) / 0.6079271
               * 2.2 / (1 + 1.2 * (0.7 + 0.3 * k.token_count / 250.0))) AS score,
           sum(i.weight * i.idf) / (SELECT sum(weight * idf) FROM informative) AS coverage
    FROM informative i
    WHERE k.keywords @@ i.query  -- first: ts_rank costs more, and only on matching terms
) t
-- Adjacent 2-grams of a content run (東京都庁 as written, not 東京 ... 都庁).
CROSS JOIN LATERAL (
    SELECT 0.5 * sum(p.weight) AS bonus FROM phrase_queries p WHERE k.keywords @@ p.query
) p
WHERE t.score IS NOT NULL
ORDER BY 2 DESC, k.id
LIMIT %(leg_limit)s;

-- name: passages
-- What a search shows of the passages it chose (`ids`), learned facts cited as what they are:
-- an employee's correction, approved by a reviewer. The legs may have run on two connections,
-- in snapshots a moment apart, so each passage's groups are checked once more. `ocr`: the
-- passage's page was read from a scan (sql/018_ocr.sql); a learned fact was typed, not read.
SELECT c.id, d.id, d.source_uri, d.path, d.title, c.heading, c.location, c.ocr, c.chunk_index,
       c.content, false AS learned
FROM chunks c
JOIN documents d ON d.id = c.document_id
WHERE c.id = ANY(%(ids)s::bigint[]) AND c.allowed_groups && %(groups)s::text[]
UNION ALL
SELECT l.id, NULL, 'kb-correction:' || r.id, '利用者による訂正 #' || r.id,
       '利用者による訂正（承認済み）',
       '承認: ' || r.reviewed_by || '（' || to_char(r.reviewed_at, 'YYYY-MM-DD') || '）',
       NULL, false, 0, r.correction, true
FROM learned_facts l
JOIN corrections r ON r.id = l.correction_id AND r.status = 'approved'  -- decided meanwhile
WHERE l.id = ANY(%(ids)s::bigint[]) AND l.allowed_groups && %(groups)s::text[];

-- name: documents_groups
-- The groups of each document, by source_uri: whom an answer's citations may reach; a learned
-- fact's are those of every document it corrects.
SELECT source_uri, allowed_groups FROM documents WHERE source_uri = ANY(%(uris)s)
UNION ALL
SELECT 'kb-correction:' || correction_id, allowed_groups FROM learned_facts
WHERE 'kb-correction:' || correction_id = ANY(%(uris)s);

-- name: unknown_terms
-- The terms no passage the caller's groups may see holds: what the question asks about that,
-- as far as this caller can tell, the company never wrote down. Read from the keyword
-- statistics of its groups (sql/025).
SELECT t.term FROM unnest(%(terms)s::text[]) AS t (term)
WHERE NOT EXISTS (
    SELECT 1 FROM keyword_df_by_group g
    WHERE g.term = t.term AND g.df > 0 AND g.group_name = ANY(%(groups)s::text[])
);

-- name: graph_leg
-- The graph leg (kb_search/graph.py): the caller's passages that name one of the question's
-- entities (`asked`), and, one reference away, the passages naming an entity those passages
-- name with it (`reached`). Only passages the caller may read are evidence, so who else may
-- read what changes nothing here. An entity named in more than `hub` readable passages (部長,
-- 就業規則) leads nowhere: the leg reads at most hub + 1 of its passages to know it is one,
-- keeps its `fanout` strongest neighbours, and reads at most hub + 1 passages of each.
-- A caller who may read few passages (`exact`, as in the other legs) has the mentions looked up
-- by entity and group together (sql/023_mentions_in_groups.sql): through the entities' index
-- the leg would pass every mention of a common entity it may not read. Only one of the two
-- branches runs; both find the same passages.
WITH asked AS MATERIALIZED (
    SELECT q.key AS entity_key, p.kind, p.chunk_id
    FROM unnest(%(entities)s::text[]) q (key)
    CROSS JOIN LATERAL (
        SELECT m.kind, m.chunk_id FROM mentions m
        WHERE NOT %(exact)s AND m.entity_key = q.key AND m.allowed_groups && %(groups)s::text[]
        LIMIT %(hub)s + 1
    ) p
    UNION ALL
    SELECT entity_key, kind, chunk_id
    FROM (SELECT m.entity_key, m.kind, m.chunk_id,
                 row_number() OVER (PARTITION BY m.entity_key ORDER BY m.chunk_id) AS n
          FROM mentions m
          WHERE %(exact)s
            AND entity_in_groups(m.entity_key, m.allowed_groups) && ARRAY(
                SELECT unnest(entity_in_groups(q.key, %(groups)s::text[]))
                FROM unnest(%(entities)s::text[]) q (key))) own
    WHERE n <= %(hub)s + 1
), sizes AS (
    SELECT entity_key, count(*) AS passages FROM asked GROUP BY entity_key
), neighbours AS (
    -- Each passage naming both counts once, and once more for each reference it makes
    -- between them (a table row, 「〜による」).
    SELECT a.entity_key AS source, m.entity_key AS target,
           (count(*) + sum((SELECT count(*) FROM relations r
                           WHERE r.chunk_id = a.chunk_id
                             AND ((r.source_key = a.entity_key AND r.target_key = m.entity_key)
                               OR (r.source_key = m.entity_key AND r.target_key = a.entity_key))
                          )))::bigint AS strength
    FROM asked a
    JOIN sizes s ON s.entity_key = a.entity_key AND s.passages <= %(hub)s
    JOIN mentions m ON m.chunk_id = a.chunk_id AND m.entity_key <> ALL(%(entities)s::text[])
    -- A role (部長, 責任者) names a position in every unit, not one thing: it leads nowhere
    -- and nothing leads to it. A regulation's own articles are itself, not its neighbours.
    WHERE a.kind <> 'role' AND m.kind <> 'role'
      AND NOT (m.kind = 'article' AND starts_with(m.entity_key, a.entity_key))
    GROUP BY a.entity_key, m.entity_key
), strongest AS (
    SELECT source, target, strength
    FROM (SELECT n.*, row_number() OVER (PARTITION BY source ORDER BY strength DESC, target) AS r
          FROM neighbours n) ranked
    WHERE r <= %(fanout)s
), reached AS MATERIALIZED (
    SELECT s.source, s.target, s.strength, p.chunk_id
    FROM strongest s
    CROSS JOIN LATERAL (
        SELECT m.chunk_id FROM mentions m
        WHERE NOT %(exact)s AND m.entity_key = s.target
          AND m.allowed_groups && %(groups)s::text[]
        LIMIT %(hub)s + 1
    ) p
    UNION ALL
    SELECT s.source, s.target, s.strength, own.chunk_id
    FROM strongest s
    JOIN (SELECT m.entity_key, m.chunk_id,
                 row_number() OVER (PARTITION BY m.entity_key ORDER BY m.chunk_id) AS n
          FROM mentions m
          WHERE %(exact)s
            AND entity_in_groups(m.entity_key, m.allowed_groups) && ARRAY(
                SELECT unnest(entity_in_groups(t.target, %(groups)s::text[]))
                FROM (SELECT DISTINCT target FROM strongest) t)) own
      ON own.entity_key = s.target AND own.n <= %(hub)s + 1
)
SELECT 'named', entity_key, NULL::text, NULL::bigint, chunk_id FROM asked
UNION ALL
SELECT 'hop', source, target, strength, chunk_id FROM reached
UNION ALL
-- A hub the question names still counts where a passage reached names it too. The reached
-- passages' ids as one array: joined, the plan read all 24,000 mentions of 就業規則 at 100k.
SELECT 'named in reached', m.entity_key, NULL, NULL, m.chunk_id
FROM mentions m
WHERE m.entity_key = ANY(%(entities)s::text[])
  AND m.chunk_id = ANY(ARRAY(SELECT DISTINCT chunk_id FROM reached));
