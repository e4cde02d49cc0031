-- Follow-up questions (kb_search/follow_ups.py): an answer may follow an earlier answer the same
-- caller received, and the chain of them is the conversation. The log keeps what the follow-up
-- was searched as and the passages each answer cited, from which the next turn reads its topic
-- (re-read for the caller's groups at that time). A turn purged by the log's retention ends the
-- chain there: the next turn's `follows` becomes NULL.
ALTER TABLE query_log ADD COLUMN follows uuid REFERENCES query_log (id) ON DELETE SET NULL;
ALTER TABLE query_log ADD COLUMN asked_as text;  -- NULL: searched as asked
ALTER TABLE query_log ADD COLUMN cited_chunks bigint[] NOT NULL DEFAULT '{}';
