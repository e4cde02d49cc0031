"""The default reranker: keeps the fused (RRF) order."""

from __future__ import annotations

from kb_search.rerankers.reranker import Candidate

__all__ = ["KeepOrderReranker"]


class KeepOrderReranker:
    name = "none"

    def rerank(self, query: str, candidates: list[Candidate], top_n: int) -> list[int]:
        """The first `top_n` chunk ids, in the order given."""
        return [c.chunk_id for c in candidates[: max(top_n, 0)]]
