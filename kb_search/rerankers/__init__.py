"""Rerankers: reorder the fused (RRF) candidates of a search before the answerer sees them.

`make_reranker(settings)` (KB_RERANKER) fails loudly on an unknown name; the LLM reranker loads
its provider's SDK only when it is built. `rerank_or_fallback` is what the search path calls: a
reranker that fails or times out costs the caller its reordering, never its search.
"""

from __future__ import annotations

import logging

from kb_core.settings import RerankerSettings
from kb_search.rerankers.cohere import CohereReranker
from kb_search.rerankers.llm import LLMReranker
from kb_search.rerankers.none import KeepOrderReranker
from kb_search.rerankers.reranker import (
    Candidate,
    Reranker,
    RerankerConfigError,
    UnknownRerankerError,
)

__all__ = [
    "Candidate",
    "Reranker",
    "RerankerConfigError",
    "UnknownRerankerError",
    "make_reranker",
    "rerank_or_fallback",
]


def make_reranker(settings: RerankerSettings) -> Reranker:
    """The reranker `settings` name (KB_RERANKER): none, cohere or llm."""
    name = settings.name
    if name == "none":
        return KeepOrderReranker()
    if name == "cohere":
        return CohereReranker.from_settings(settings)
    if name == "llm":
        return LLMReranker.from_settings(settings)
    raise UnknownRerankerError(
        f"unknown reranker {name!r} (KB_RERANKER): expected none, cohere or llm"
    )


def rerank_or_fallback(
    reranker: Reranker,
    query: str,
    candidates: list[Candidate],
    top_n: int,
    log: logging.Logger | logging.LoggerAdapter,
) -> tuple[list[int], str | None]:
    """(chunk ids best first, warning or None); on any reranker failure, the fused order."""
    fused = [c.chunk_id for c in candidates[: max(top_n, 0)]]
    if not fused:
        return [], None
    try:
        order = reranker.rerank(query, candidates, top_n)
        _check_order(order, candidates, top_n)
    # Deliberately broad: a provider can fail in ways no list of exceptions anticipates
    # (network, HTTP status, SDK validation, a reply we cannot parse), and the search must
    # still answer. The failure is logged in full and reported to the caller as a warning.
    except Exception as exc:  # noqa: BLE001
        log.warning(
            "reranker %s failed (%s: %s); fused order kept",
            reranker.name, type(exc).__name__, exc,
        )
        # Only the exception's type reaches the caller: its message may carry URLs or keys.
        return fused, f"reranker {reranker.name} failed ({type(exc).__name__}); fused order kept"
    return order, None


def _check_order(order: list[int], candidates: list[Candidate], top_n: int) -> None:
    """Raise ValueError unless `order` holds distinct candidate ids, at most `top_n`."""
    known = {c.chunk_id for c in candidates}
    if len(order) > top_n or len(set(order)) != len(order) or not known.issuperset(order):
        raise ValueError(f"reranker returned an invalid order: {order[:20]!r}")
