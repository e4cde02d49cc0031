"""Every fitter keeps every development set (kb_eval/fit/devsets.py, keep_every_set): a fit that
lowers a set's figure by more than one question is reported, and not written."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from kb_eval.fit.answerability_model import DevSet, in_sample
from kb_eval.fit.devsets import keep_every_set
from kb_search.answerability import default_models

BEFORE = {"samples": {"recall": (0.80, 0.05)}, "jaquad": {"recall": (0.90, 0.01)}}


def args(write: bool, accept_loss: bool = False) -> argparse.Namespace:
    return argparse.Namespace(write=write, accept_loss=accept_loss)


def test_a_fall_within_one_question_is_kept_and_every_set_printed(capsys) -> None:
    after = {"samples": {"recall": (0.76, 0.05)}, "jaquad": {"recall": (0.95, 0.01)}}
    keep_every_set(BEFORE, after, args(write=True))
    printed = capsys.readouterr().out
    assert "samples: recall 0.8000 -> 0.7600" in printed
    assert "jaquad: recall 0.9000 -> 0.9500" in printed
    assert "fell" not in printed


def test_a_fall_of_more_than_one_question_is_not_written() -> None:
    after = {"samples": {"recall": (0.85, 0.05)}, "jaquad": {"recall": (0.88, 0.01)}}
    with pytest.raises(SystemExit, match="jaquad: recall 0.9000 -> 0.8800"):
        keep_every_set(BEFORE, after, args(write=True))
    keep_every_set(BEFORE, after, args(write=False))  # a fit only reported is reported
    keep_every_set(BEFORE, after, args(write=True, accept_loss=True))


def test_a_first_fit_has_nothing_to_keep(capsys) -> None:
    keep_every_set({}, {"samples": {"recall": (0.1, 0.05)}}, args(write=True))
    assert "samples: recall - -> 0.1000" in capsys.readouterr().out


def test_a_fit_keeps_each_kind_of_miss_and_the_answered_questions_of_every_set() -> None:
    model = default_models().for_embedder(None)
    strong = [0.95, 0.9, 0.0, 1.0, 1.0, 1.0, 0.0]  # FEATURES of a question answered
    weak = [0.80, 0.1, 0.8, 0.0, 0.1, 5.0, 1.0]  # and of one refused
    s = DevSet("set", "model", np.array([strong, strong, weak, strong]),
               answerable=np.array([True, True, False, False]),
               refused=np.zeros(4, dtype=bool), found=np.array([True, False, False, False]),
               folds=np.arange(4), miss=np.array(["", "", "far", "near"]))
    figures = in_sample([s], model, 0.01)["set"]
    assert figures == {"answered with the document found": (0.5, 0.5),
                       "not found recall": (0.5, 0.5),
                       "far misses refused": (1.0, 1.0), "near misses refused": (0.0, 1.0)}
