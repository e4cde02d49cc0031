"""The extractive answerer's sentence model (kb_search/answerers/sentences.py) and the fitter
that fits it (kb_eval/fit/sentence_model.py): the committed model's shape, and the fit choosing what
the product chooses."""

from __future__ import annotations

import numpy as np

from kb_eval.fit import sentence_model as fitter
from kb_search.answerers import Passage
from kb_search.answerers.sentences import (
    FEATURES,
    candidate_sentences,
    choose_sentences,
    default_model,
)

PASSAGES = [
    Passage(n=1, chunk_id=1, document_id=1, ocr=False,
            path="wiki/ベル.md", title="ベル", heading="生涯", page=None,
            content=("ベル一家はロンドンで暮らした。ベル一家は1865年にロンドンへ移った。"
                     "ベル一家の父はロンドンで講演を続けた。")),
    Passage(n=2, chunk_id=2, document_id=2, ocr=False,
            path="hr/旅費.md", title="旅費規程", heading="宿泊費", page=None,
            content=("宿泊費は1泊12,000円を上限とする。\n"
                     "| 区分 | 上限 |\n|---|---|\n| 役員 | 15,000円 |")),
]
QUESTIONS = [("ベル一家がロンドンに移ったのはいつですか", "1865年"),
             ("役員の宿泊費の上限はいくらですか", "15,000円"),
             ("ベル一家の父がロンドンで続けたのは何ですか", "講演")]


def test_the_committed_model_is_fitted_for_these_features():
    model = default_model()
    assert set(model.features) <= set(FEATURES)
    assert len(model.weights) == len(model.mean) == len(model.scale) == len(model.features)
    assert 0 < model.coverage <= 1 and model.max_chars > 0
    assert "fit/sentences.py" in model.fitted_on


def test_the_fit_scores_and_picks_the_sentences_the_answerer_quotes():
    asked = [fitter.Asked(q, a, f"d{i}", None, PASSAGES) for i, (q, a) in enumerate(QUESTIONS)]
    questions = fitter.described(asked)
    model = default_model()
    for a, q, scores in zip(asked, questions, fitter.scored(model, questions), strict=True):
        candidates, rows = candidate_sentences(a.question, a.passages)
        assert np.allclose(scores, model.scores(rows))
        quoted = choose_sentences(a.question, a.passages, model)
        holds, length = fitter.quoted(model, q, scores)
        assert length == sum(len(s.text) for s in quoted)
        assert holds == any(a.answer in s.text for s in quoted)
        assert holds  # each of these questions has its answer in one plain sentence


def test_the_fit_learns_to_prefer_the_sentences_holding_the_answer():
    asked = [fitter.Asked(q, a, f"d{i}", None, PASSAGES) for i, (q, a) in enumerate(QUESTIONS)]
    questions = fitter.described(asked) * 20
    mean, scale, weights = fitter.fit(questions)
    for q in questions[:3]:
        scores = ((q.features - mean) / scale) @ weights
        assert q.holds[int(np.argmax(scores))]


def test_the_words_beside_the_question_word_point_at_the_sentence_answering_it():
    candidates, rows = candidate_sentences("ベル一家の父がロンドンで続けたのは何ですか", PASSAGES)
    context = [row[FEATURES.index("asked_context")] for row in rows]
    assert candidates[context.index(max(context))].text == "ベル一家の父はロンドンで講演を続けた。"


def test_a_question_without_a_question_word_gives_no_asked_context():
    _, rows = candidate_sentences("役員の宿泊費の上限", PASSAGES)
    assert rows and all(row[FEATURES.index("asked_context")] == 0 for row in rows)


