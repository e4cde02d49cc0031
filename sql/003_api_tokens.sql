-- API tokens for apps (`kb token create NAME --groups ...`). A token is shown once; only its
-- SHA-256 is kept. Tokens are 32 random bytes, so a fast hash is enough: there is nothing to
-- brute-force, unlike a password, and a leaked table reveals no usable token.
CREATE TABLE api_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text NOT NULL CHECK (name <> ''),
    token_hash   text NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),  -- SHA-256, hex
    prefix       text NOT NULL,            -- first 8 characters: tells tokens apart in listings
    groups       text[] NOT NULL CHECK (cardinality(groups) > 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,              -- updated at most once a minute
    revoked_at   timestamptz               -- a revoked token keeps its row, for the record
);

-- A name identifies one live token; once revoked, the name can be given to a new one.
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_at IS NULL;
