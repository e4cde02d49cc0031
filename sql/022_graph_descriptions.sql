-- The LLM entity extractor (KB_GRAPH_LLM, docs/knowledge-graph.md#the-llm-extractor): what a
-- passage says of an entity it names, and of a relation it states, as the model read it. NULL
-- where the rules alone found them. Every generation's tables gain the columns; the views onto
-- the live generation are made again to show them (a view's columns are fixed when it is made).
DO $$
DECLARE
    gen text;
BEGIN
    FOR gen IN
        SELECT nspname FROM pg_namespace
        WHERE nspname ~ '^kb_gen_[0-9]+$' AND to_regclass(quote_ident(nspname) || '.mentions') IS NOT NULL
    LOOP
        EXECUTE format($sql$
            ALTER TABLE %1$I.mentions ADD COLUMN description text;
            ALTER TABLE %1$I.relations ADD COLUMN description text;
        $sql$, gen);
    END LOOP;
    gen := 'kb_gen_' || (SELECT id FROM index_generations WHERE state = 'live');
    EXECUTE format('CREATE OR REPLACE VIEW public.mentions AS SELECT * FROM %I.mentions', gen);
    EXECUTE format('CREATE OR REPLACE VIEW public.relations AS SELECT * FROM %I.relations', gen);
END
$$;

-- The model's reading of a passage, by the passage text's SHA-256, the model (provider/model)
-- and the prompt's version (kb_pipeline/graph_llm.py): a passage is sent to a provider once,
-- whatever the generation, run or document it is indexed in. Shared by all generations, like
-- the embedding cache. Failures are never kept: the passage is asked again next time.
CREATE TABLE graph_llm_cache (
    model          text NOT NULL,
    prompt_version text NOT NULL,
    text_sha256    text NOT NULL,
    extraction     jsonb NOT NULL,  -- {"entities": [...], "relations": [...]} before the evidence tie
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, prompt_version, text_sha256)
);
