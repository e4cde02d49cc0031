#!/usr/bin/env bash
# Runs once, by the image's entrypoint, when the data directory is first initialised
# (as the superuser POSTGRES_USER, against the temporary server it starts for this).
set -euo pipefail

dagster_db="${DAGSTER_PG_DB:-dagster}"

# The search index's extensions, in the kb database (POSTGRES_DB).
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<'SQL'
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS pg_bigm;
SQL

# Dagster's runs, event logs and schedules live in their own database.
# CREATE DATABASE cannot run in a transaction block or take IF NOT EXISTS: \gexec it.
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v dagster_db="$dagster_db" -v owner="$POSTGRES_USER" <<'SQL'
SELECT format('CREATE DATABASE %I OWNER %I', :'dagster_db', :'owner')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'dagster_db')\gexec
SQL
