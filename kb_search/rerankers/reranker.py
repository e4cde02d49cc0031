"""What every reranker offers, what it is offered, and how building one fails."""

from __future__ import annotations

from typing import Protocol

import msgspec

__all__ = ["Candidate", "Reranker", "RerankerConfigError", "UnknownRerankerError"]


class Candidate(msgspec.Struct, frozen=True):
    """One fused search hit offered to a reranker."""

    chunk_id: int
    text: str


class Reranker(Protocol):
    """What every reranker offers."""

    name: str  # provider and model, e.g. "cohere/rerank-v3.5"; "none" keeps the fused order

    def rerank(self, query: str, candidates: list[Candidate], top_n: int) -> list[int]:
        """Chunk ids of `candidates`, best first, at most `top_n` of them."""
        ...


class RerankerConfigError(ValueError):
    """A reranker cannot be built from the configuration (unknown name, missing key)."""


class UnknownRerankerError(RerankerConfigError):
    pass
