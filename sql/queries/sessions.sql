-- name: create_web_session
INSERT INTO web_sessions (id_hash, caller_kind, subject, display_name, groups, csrf_token,
                          expires_at)
VALUES (%(id_hash)s, %(caller_kind)s, %(subject)s, %(display_name)s, %(groups)s,
        %(csrf_token)s, now() + make_interval(secs => %(max_s)s));

-- name: web_session
-- A live session: within both its absolute limit and the idle limit. Its last use is
-- recorded at most once a minute, so reading pages does not write a row per request.
WITH live AS (
    SELECT * FROM web_sessions
    WHERE id_hash = %(id_hash)s
      AND expires_at > now()
      AND last_seen_at > now() - make_interval(secs => %(idle_s)s)
), touched AS (
    UPDATE web_sessions s SET last_seen_at = now()
    FROM live WHERE s.id_hash = live.id_hash AND live.last_seen_at < now() - interval '1 minute'
)
SELECT caller_kind, subject, display_name, groups, csrf_token FROM live;

-- name: delete_web_session
DELETE FROM web_sessions WHERE id_hash = %(id_hash)s;

-- name: purge_web_sessions
DELETE FROM web_sessions
WHERE expires_at <= now() OR last_seen_at <= now() - make_interval(secs => %(idle_s)s)
   OR (caller_kind = 'dev' AND NOT %(dev_sign_in)s);

-- name: create_sign_in_attempt
INSERT INTO sign_in_attempts (state_hash, browser_hash, nonce, code_verifier, return_to)
VALUES (%(state_hash)s, %(browser_hash)s, %(nonce)s, %(code_verifier)s, %(return_to)s);

-- name: take_sign_in_attempt
-- Single use: the attempt is gone once read, whether or not the rest of the sign-in succeeds.
DELETE FROM sign_in_attempts
WHERE state_hash = %(state_hash)s
RETURNING browser_hash, nonce, code_verifier, return_to,
          created_at > now() - make_interval(secs => %(valid_s)s) AS fresh;

-- name: purge_sign_in_attempts
DELETE FROM sign_in_attempts WHERE created_at <= now() - make_interval(secs => %(valid_s)s);
