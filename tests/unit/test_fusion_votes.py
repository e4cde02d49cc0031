"""The fusion of the legs' passages (kb_search/fusion.py), by hand-computed votes."""

from __future__ import annotations

import math

import pytest

from kb_search.fusion import PLAIN, Fusion, fuse

# (id, similarity, holds every code) best first; (id, score, coverage, holds every code).
VECTOR = [(7, 0.90, False), (3, 0.85, False), (9, 0.80, False)]
KEYWORD = [(3, 12.0, 1.0, False), (5, 6.0, 0.25, False)]


def test_plain_rrf_adds_each_legs_vote_and_scales_a_thin_keyword_hit_by_its_coverage():
    fused = fuse(VECTOR, KEYWORD, [], PLAIN, 1.0, 10)
    assert [f.id for f in fused] == [3, 7, 9, 5]
    by_id = {f.id: f for f in fused}
    assert by_id[3].score == pytest.approx(1 / 62 + 1 / 61)
    assert by_id[5].score == pytest.approx(0.5 / 62)  # coverage 0.25 of FULL_COVERAGE 0.5
    assert (by_id[3].vector_rank, by_id[3].keyword_rank) == (2, 1)
    assert (by_id[7].keyword_rank, by_id[7].keyword_score, by_id[7].coverage) == (None,) * 3
    assert (by_id[5].vector_rank, by_id[5].similarity) == (None, None)


def test_each_legs_vote_grows_with_its_margin_between_its_first_and_fifth():
    fusion = Fusion(k=10.0, vector_bias=0.2, vector_margin=40.0, keyword_margin=2.0)
    fused = {f.id: f.score for f in fuse(VECTOR, KEYWORD, [], fusion, 1.5, 10)}
    vector = math.exp(0.2 + 40.0 * (0.90 - 0.80))
    keyword = 1.5 * math.exp(2.0 * (1 - 6.0 / 12.0))
    assert fused[7] == pytest.approx(vector / 11)
    assert fused[3] == pytest.approx(vector / 12 + keyword / 11)
    assert fused[5] == pytest.approx(keyword * 0.5 / 12)


def test_a_passage_holding_every_code_gets_a_first_rank_share_once():
    coded = [(3, 12.0, 1.0, True), (5, 6.0, 0.25, False)]
    fused = {f.id: f.score for f in fuse([(3, 0.85, True)], coded, [], PLAIN, 1.0, 10)}
    assert fused[3] == pytest.approx(1 / 61 + 1 / 61 + 1 / 61)


def test_ties_go_to_the_lower_id_and_k_cuts_the_list():
    fused = fuse([(8, 0.5, False)], [(4, 1.0, 1.0, False)], [], PLAIN, 1.0, 1)
    assert [f.id for f in fused] == [4]


def test_the_graph_leg_votes_by_its_rank_and_breaks_its_ties_by_the_other_legs():
    # 9 and 5 tie in the graph leg; 5 stands higher in another leg (keyword 2 against vector
    # 3), so it ranks first there.
    fusion = Fusion(graph_bias=0.5)
    fused = {f.id: f for f in fuse(VECTOR, KEYWORD, [(9, 2.0), (5, 2.0), (4, 1.0)], fusion,
                                   1.0, 10)}
    assert (fused[5].graph_rank, fused[9].graph_rank, fused[4].graph_rank) == (1, 2, 3)
    assert fused[5].score == pytest.approx(0.5 / 62 + math.exp(0.5) / 61)
    assert fused[9].score == pytest.approx(1 / 63 + math.exp(0.5) / 62)
    assert fused[4].score == pytest.approx(math.exp(0.5) / 63)
    assert fused[7].graph_rank is None


def test_no_passages_fuse_to_none():
    assert fuse([], [], [], PLAIN, 1.0, 10) == []
