"""The ingestion pipeline: its stages (catalogue, parsing, chunking, embedding, indexing), run
bookkeeping, the Dagster definitions that drive them (`defs`) and the in-process drivers of
`kb ingest` and `kb generation rebuild`."""
