"""The ingestion pipeline: its stages (catalogue, parsing, chunking, embedding, indexing), run
bookkeeping, the plain logic of its domains (rebuild rounds, integrity statements, an index
measured by the question sets), the Dagster definitions that drive them (`defs`, one package
per domain) and the in-process drivers of `kb ingest` and `kb generation rebuild`."""
