-- Every change of the index version (documents added, changed or deleted, their groups, a
-- published generation, a learned fact approved or withdrawn) tells the query services that
-- LISTEN at its commit. A service then reads the primary's WAL position, which a streaming
-- replica must have replayed before it may answer a search (kb_core/read_routing.py): the
-- position is read after the commit, because one recorded inside the changing transaction
-- would precede its commit record, and a replica that had replayed up to it would not yet see
-- the change. Notices of one transaction are folded into one (same channel, same payload).
CREATE FUNCTION notify_index_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('kb_index_changed', '');
    RETURN NULL;
END $$;

CREATE TRIGGER index_state_change_notice
AFTER UPDATE ON index_state
FOR EACH STATEMENT EXECUTE FUNCTION notify_index_change();
