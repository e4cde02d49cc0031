"""The Dagster definitions by domain, one package each with only the modules it needs
(assets.py, checks.py, jobs.py, sensors.py, schedules.py): ingestion (the asset graph, its index
checks, its job), evaluation, generations (gated rebuilds), learned_facts, knowledge_gaps (the
weekly report's counts), and watched_folders (the folder sensor, which launches ingestion and
rebuild runs), over the resources and run loggers they share (resources.py, run_logging.py).
Their plain logic lives outside, in kb_pipeline's modules; one `Definitions` object gathers
them (kb_pipeline/definitions.py)."""

import warnings

import dagster as dg

# Single-run backfill policies are beta in Dagster 1.13; we rely on them knowingly (few runs
# for many documents), so the warning would only repeat on every load.
warnings.filterwarnings("ignore", category=dg.BetaWarning, message=".*backfill_policy.*")
