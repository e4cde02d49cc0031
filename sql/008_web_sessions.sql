-- The employee page's sign-in: server-side sessions and the sign-ins in flight.
-- A session is found by the SHA-256 of the cookie's value, so the table holds nothing a
-- reader could present as a cookie.
CREATE TABLE web_sessions (
    id_hash      text PRIMARY KEY,
    caller_kind  text NOT NULL,              -- 'jwt' (the company's provider) or 'dev'
    subject      text NOT NULL,
    display_name text NOT NULL,
    groups       text[] NOT NULL,            -- from the verified ID token, fixed until the next sign-in
    csrf_token   text NOT NULL,              -- required on every state-changing request
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL        -- the absolute limit, whatever the activity
);
CREATE INDEX web_sessions_expires_at ON web_sessions (expires_at);

-- An authorization request sent to the provider and not yet answered. Found by the SHA-256 of
-- its `state`, deleted when the answer arrives (single use), and valid only for the browser
-- holding the cookie whose hash it records.
CREATE TABLE sign_in_attempts (
    state_hash    text PRIMARY KEY,
    browser_hash  text NOT NULL,
    nonce         text NOT NULL,
    code_verifier text NOT NULL,
    return_to     text NOT NULL,             -- a path on this site
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sign_in_attempts_created_at ON sign_in_attempts (created_at);
