"""Ollama embeddings over its HTTP API (POST /api/embed)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import numpy as np

from kb_core.embeddings.embedder import l2_normalize
from kb_core.embeddings.tokens import E5_WINDOW, count_tokens

__all__ = ["OllamaEmbedder"]


@dataclass
class OllamaEmbedder:
    host: str = "http://127.0.0.1:11434"
    model: str = "bge-m3"
    dim: int = 1024
    max_tokens: int = E5_WINDOW
    timeout_s: float = 60.0

    @property
    def name(self) -> str:
        return f"ollama/{self.model}@{self.dim}"

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        host = self.host if "://" in self.host else f"http://{self.host}"
        reply = httpx.post(
            f"{host.rstrip('/')}/api/embed",
            json={"model": self.model, "input": texts},
            timeout=self.timeout_s,
        )
        reply.raise_for_status()
        vectors = np.asarray(reply.json()["embeddings"], dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise ValueError(
                f"Ollama model {self.model} returned vectors of shape {vectors.shape}, "
                f"expected ({len(texts)}, {self.dim}): set KB_OLLAMA_EMBEDDING_DIM"
            )
        return l2_normalize(vectors)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)
