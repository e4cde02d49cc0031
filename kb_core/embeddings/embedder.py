"""What every embedding provider offers, and the unit length every vector of the index has."""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = ["Embedder", "UnknownEmbedderError", "l2_normalize"]


class Embedder(Protocol):
    """What every embedding provider offers."""

    name: str  # identifies model and variant; recorded with the index
    dim: int
    max_tokens: int  # the chunker's budget per passage, prefix included

    def embed_query(self, text: str) -> np.ndarray: ...

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def count_tokens(self, text: str) -> int: ...


class UnknownEmbedderError(ValueError):
    pass


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows left as they are), as the index expects."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)
