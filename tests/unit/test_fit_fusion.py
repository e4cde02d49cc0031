"""kb_eval/fit/fusion.py scores a grid of fusions with a vectorised copy of
kb_search.fusion.fuse, for speed; the two must agree on every candidate, or the fit optimises
something the product does not run (issue 42)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kb_eval.fit.fusion import Candidates
from kb_search.fusion import Fusion, fuse

FUSIONS = st.builds(Fusion, k=st.sampled_from([1.0, 10.0, 60.0]),
                    vector_bias=st.floats(-2, 2), vector_margin=st.floats(0, 60),
                    keyword_margin=st.floats(0, 5))


@st.composite
def legs(draw):
    """Two legs over a few chunk ids, each best first, some ids in both."""
    ids = draw(st.lists(st.integers(1, 40), min_size=1, max_size=25, unique=True))
    in_vector = draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids)))
    in_keyword = draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids)))
    coded = draw(st.sets(st.sampled_from(ids)))
    similarities = sorted(draw(st.lists(st.floats(0.7, 1.0), min_size=len(in_vector),
                                        max_size=len(in_vector))), reverse=True)
    scores = sorted(draw(st.lists(st.floats(0.01, 5.0), min_size=len(in_keyword),
                                  max_size=len(in_keyword))), reverse=True)
    coverages = draw(st.lists(st.floats(0, 1), min_size=len(in_keyword),
                              max_size=len(in_keyword)))
    vector = [(i, s, i in coded) for i, s in zip(in_vector, similarities, strict=True)]
    keyword = [(i, s, c, i in coded)
               for i, s, c in zip(in_keyword, scores, coverages, strict=True)]
    return vector, keyword


def _candidates(vector, keyword, keyword_weight: float) -> tuple[list[int], Candidates]:
    """The fitter's arrays for the same legs, one entry per chunk either leg found."""
    ids = sorted({row[0] for row in [*vector, *keyword]})
    v = {i: (rank, s, c) for rank, (i, s, c) in enumerate(vector, start=1)}
    k = {i: (rank, s, cov, c) for rank, (i, s, cov, c) in enumerate(keyword, start=1)}
    return ids, Candidates(
        vector_rank=np.array([v[i][0] if i in v else 0 for i in ids]),
        keyword_rank=np.array([k[i][0] if i in k else 0 for i in ids]),
        similarity=np.array([v[i][1] if i in v else 0.0 for i in ids]),
        keyword_score=np.array([k[i][1] if i in k else 0.0 for i in ids]),
        coverage=np.array([k[i][2] if i in k else 0.0 for i in ids]),
        coded=np.array([float((i in v and v[i][2]) or (i in k and k[i][3])) for i in ids]),
        relevant=np.zeros(len(ids), dtype=bool),
        keyword_weight=keyword_weight,
        fold=0,
    )


@settings(max_examples=300, deadline=None)
@given(legs(), FUSIONS, st.floats(0.1, 3.0))
def test_the_fitters_vectorised_fusion_scores_every_candidate_as_fuse_does(
        both, fusion, keyword_weight):
    vector, keyword = both
    fused = {f.id: f.score for f in fuse(vector, keyword, fusion, keyword_weight, k=1000)}
    ids, candidates = _candidates(vector, keyword, keyword_weight)
    scores = candidates.scores(fusion)
    assert sorted(fused) == ids
    np.testing.assert_allclose(scores, [fused[i] for i in ids], rtol=1e-12, atol=1e-15)
