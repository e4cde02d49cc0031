"""OpenAI embeddings (text-embedding-3-small), shortened to the index's 384 dimensions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kb_core.embeddings.embedder import l2_normalize
from kb_core.embeddings.tokens import E5_WINDOW, count_tokens

__all__ = ["OpenAIEmbedder"]


@dataclass
class OpenAIEmbedder:
    model: str = "text-embedding-3-small"
    dim: int = 384  # text-embedding-3 models can return shortened vectors natively
    max_tokens: int = E5_WINDOW
    timeout_s: float = 30.0
    batch_size: int = 128

    @property
    def name(self) -> str:
        return f"openai/{self.model}@{self.dim}"

    def _client(self):  # noqa: ANN202
        import openai

        # OPENAI_API_KEY and OPENAI_BASE_URL are read by the SDK at call time.
        return openai.OpenAI(timeout=self.timeout_s, max_retries=2)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        client = self._client()
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            reply = client.embeddings.create(model=self.model, input=batch, dimensions=self.dim)
            rows.extend(item.embedding for item in sorted(reply.data, key=lambda d: d.index))
        return l2_normalize(np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim))

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)
