"""Ingestion: the asset graph from watched files to search_index (assets.py), its index checks
(checks.py) and the ingest_documents job (jobs.py), which the folder sensor
(defs/watched_folders/), `kb ingest` and a rebuild's build rounds launch."""
