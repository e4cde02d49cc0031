"""A deterministic, instant stand-in: hashed keyword terms. For tests and benches that do not
measure retrieval quality; it makes the pipeline's own overhead visible."""

from __future__ import annotations

import hashlib

import numpy as np

from kb_core.embeddings.tokens import E5_WINDOW, count_tokens
from kb_core.keywords import terms

__all__ = ["HashingEmbedder"]


class HashingEmbedder:
    name = "hashing/terms-384"
    dim = 384
    max_tokens = E5_WINDOW

    def _embed(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        for term in terms(text) or [""]:
            digest = hashlib.blake2b(term.encode(), digest_size=8).digest()
            slot = int.from_bytes(digest[:4], "little") % self.dim
            vec[slot] += 1.0 if digest[4] & 1 else -1.0
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            vec[0] = 1.0
            return vec
        return vec / norm

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed(text)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._embed(t) for t in texts]) if texts else np.zeros((0, self.dim))

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)
