"""The Dagster definitions by domain: ingestion (assets, the folder sensor, index checks),
evaluation, and gated rebuilds (generations), over the resources they share. One `Definitions`
object gathers them (kb_pipeline/definitions.py)."""

import warnings

import dagster as dg

# Single-run backfill policies are beta in Dagster 1.13; we rely on them knowingly (few runs
# for many documents), so the warning would only repeat on every load.
warnings.filterwarnings("ignore", category=dg.BetaWarning, message=".*backfill_policy.*")
