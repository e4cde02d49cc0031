"""The one place the engine is assembled from the configuration, for every door: the query
service, the `kb` command and the Dagster evaluation."""

from __future__ import annotations

from kb_core.settings import Settings
from kb_search.answerers import make_answerer
from kb_search.asking import Asker
from kb_search.rerankers import make_reranker
from kb_search.search import Searcher
from kb_search.synonyms import Synonyms

__all__ = ["build_engine", "build_searcher"]


def build_searcher(settings: Settings) -> Searcher:
    """Retrieval alone (planner, synonyms, embedder, reranker): for doors that only search,
    which need no answerer and so no answerer's API key."""
    return Searcher(settings.embedder, Synonyms(settings.synonyms),
                    make_reranker(settings.reranker))


def build_engine(settings: Settings) -> Asker:
    """Retrieval, the evidence gate and the configured answerer, ready to answer."""
    return Asker(build_searcher(settings), make_answerer(settings.answerer),
                 settings.max_false_not_found)
