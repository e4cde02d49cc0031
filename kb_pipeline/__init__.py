"""The ingestion pipeline: Dagster assets from watched folders to the search index."""

import warnings

import dagster as dg

# Single-run backfill policies are beta in Dagster 1.13; we rely on them knowingly (few runs
# for many documents), so the warning would only repeat on every import.
warnings.filterwarnings("ignore", category=dg.BetaWarning, message=".*backfill_policy.*")
