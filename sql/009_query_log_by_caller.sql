-- The page lists each employee's recent questions on every load: find a caller's log entries,
-- newest first, without scanning the whole query log.
CREATE INDEX query_log_by_caller ON query_log (caller_kind, caller_subject, created_at DESC);
