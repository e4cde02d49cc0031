-- name: wal_position
-- The primary's WAL insert position in bytes: at or past the end of every record already
-- committed, so a replica that has replayed it sees every commit before this call.
SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint;

-- name: replay_position
-- How far a standby has replayed the primary's WAL, in bytes; NULL on a server that is not in
-- recovery (not a streaming replica).
SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint;
