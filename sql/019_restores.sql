-- Restores from a backup (kb restore). A restored installation is not ready to answer until
-- the folder sensor has read the watched folders' access rules again: a rule edited after the
-- backup was taken must narrow its documents before anyone searches them.
CREATE TABLE restores (
    restored_at timestamptz PRIMARY KEY DEFAULT now(),
    backup_taken_at timestamptz NOT NULL,
    rules_reread_at timestamptz
);
