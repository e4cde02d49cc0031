"""Cohere Rerank v2 over HTTP (POST /v2/rerank)."""

from __future__ import annotations

import httpx
import msgspec

from kb_core.settings import RerankerSettings
from kb_search.rerankers.reranker import Candidate, RerankerConfigError

__all__ = ["CohereReranker"]

DEFAULT_TIMEOUT_S = 5.0


class _RerankResult(msgspec.Struct):
    index: int
    relevance_score: float


class _RerankResponse(msgspec.Struct):
    results: list[_RerankResult]


class CohereReranker:
    """Orders candidates by Cohere's relevance score; one HTTP client kept for its connections."""

    def __init__(
        self,
        api_key: str,
        base_url: str,
        model: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not api_key:
            raise RerankerConfigError("KB_RERANKER=cohere needs COHERE_API_KEY")
        self.model = model
        self.timeout_s = timeout_s
        self._url = f"{base_url.rstrip('/')}/v2/rerank"
        self._client = httpx.Client(
            timeout=timeout_s, headers={"Authorization": f"Bearer {api_key}"}
        )

    @classmethod
    def from_settings(cls, settings: RerankerSettings) -> CohereReranker:
        return cls(api_key=settings.cohere_api_key, base_url=settings.cohere_base_url,
                   model=settings.cohere_model, timeout_s=settings.timeout_s or DEFAULT_TIMEOUT_S)

    @property
    def name(self) -> str:
        return f"cohere/{self.model}"

    def rerank(self, query: str, candidates: list[Candidate], top_n: int) -> list[int]:
        """Chunk ids best first, as Cohere scores them against `query`."""
        top_n = min(top_n, len(candidates))
        if top_n <= 0:
            return []
        reply = self._client.post(
            self._url,
            json={
                "model": self.model,
                "query": query,
                "documents": [c.text for c in candidates],
                "top_n": top_n,
            },
        )
        reply.raise_for_status()
        results = msgspec.json.decode(reply.content, type=_RerankResponse).results
        if any(not 0 <= r.index < len(candidates) for r in results):
            raise ValueError(f"Cohere returned an index outside 0..{len(candidates) - 1}")
        ranked = sorted(results, key=lambda r: r.relevance_score, reverse=True)
        return list(dict.fromkeys(candidates[r.index].chunk_id for r in ranked))[:top_n]
