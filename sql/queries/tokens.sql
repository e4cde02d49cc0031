-- name: create_api_token
INSERT INTO api_tokens (name, token_hash, prefix, groups)
VALUES (%(name)s, %(token_hash)s, %(prefix)s, %(groups)s)
RETURNING id;

-- name: list_api_tokens
-- Never the hash: a listing tells tokens apart by name and prefix.
SELECT name, prefix, groups, created_at, last_used_at, revoked_at IS NOT NULL AS revoked
FROM api_tokens
ORDER BY created_at, id;

-- name: revoke_api_token
-- How many live tokens of that name were revoked: 0 or 1.
WITH revoked AS (
    UPDATE api_tokens SET revoked_at = now()
    WHERE name = %(name)s AND revoked_at IS NULL
    RETURNING 1
)
SELECT count(*) AS revoked FROM revoked;

-- name: api_token_by_hash
-- The live token with this hash, and whether its last_used_at is due for an update.
SELECT id, name, token_hash, groups,
       last_used_at IS NULL OR last_used_at < now() - interval '1 minute' AS touch_due
FROM api_tokens
WHERE token_hash = %(token_hash)s AND revoked_at IS NULL;

-- name: touch_api_token
-- At most one write a minute per token, however many requests race here.
UPDATE api_tokens SET last_used_at = now()
WHERE id = %(id)s
  AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute');
