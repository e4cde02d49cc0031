"""A question set run against one knowledge base: every question searched in each mode and,
when asked, answered, each as a caller with the question's own groups, through the engine's
face (`KnowledgeBase`). The same run serves `kb eval`, the Dagster evaluation of the live index
and that of a rebuilt generation not yet live (opened with `generation=`)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from kb_core.callers import Caller
from kb_core.progress import report as report_progress
from kb_eval.answers import AnswerMetrics, evaluate_answers
from kb_eval.judge import FaithfulnessJudge, judge_answers
from kb_eval.questions import EvalQuestion
from kb_eval.refusals import RefusalPoint, refusal_curve
from kb_eval.retrieval import DEPTH, ModeMetrics, evaluate, recall_curve
from kb_search import MODES, Assessment, KnowledgeBase, Mode, SearchHit

__all__ = ["EvalReport", "eval_caller", "run_question_set"]


class EvalReport(msgspec.Struct):
    """One question set run against one index (`run_question_set`)."""

    questions: int
    k: int
    modes: dict[str, ModeMetrics]
    curves: dict[str, list[float]]  # per mode, Recall@1..10
    answers: AnswerMetrics | None = None  # measured only when answers are asked for
    # "not found" as the answerability threshold moves (KB_MAX_FALSE_NOT_FOUND), with answers
    refusal_curve: list[RefusalPoint] = msgspec.field(default_factory=list)


def eval_caller(question: EvalQuestion, groups: Sequence[str]) -> Caller:
    """Whom a question is put as: an "eval" caller with the question's own groups, else the
    set's default `groups`."""
    own = question.groups if question.groups is not None else groups
    return Caller(kind="eval", subject="eval", groups=tuple(own))


def run_question_set(
    kb: KnowledgeBase,
    questions: list[EvalQuestion],
    *,
    groups: Sequence[str] = (),
    k: int = 5,
    modes: Sequence[Mode] = MODES,
    answers: bool = False,
    judge: FaithfulnessJudge | None = None,
) -> EvalReport:
    """Every question searched in each of `modes` (and, with `answers`, answered) as an "eval"
    caller with the question's own "groups", else `groups`; with a `judge` too, the found
    answers are scored for faithfulness (`judge_answers`). The report's `answers` is None
    without `answers`."""
    fetch = max(k, DEPTH)  # MRR@10 and nDCG@10 need ten hits whatever k is
    report = EvalReport(questions=len(questions), k=k, modes={}, curves={})
    report_progress("questions", count=len(questions) * (len(modes) + answers))
    # Question by question, so that its embedding, kept by the engine for its latest
    # questions, serves every mode and the answer: a set's questions outnumber what it keeps.
    found: dict[Mode, list[list[SearchHit]]] = {mode: [] for mode in modes}
    assessed: list[Assessment] = []
    for q in questions:
        caller = eval_caller(q, groups)
        for mode in modes:
            found[mode].append(kb.search(caller, q.question, fetch, mode).hits)
            report_progress("question")
        if answers:
            assessed.append(kb.assess(caller, q.question))
            report_progress("question")
    for mode, results in found.items():
        hits = [[h.source_uri for h in hits] for hits in results]
        contents = [[h.content for h in hits] for hits in results]
        report.modes[mode] = evaluate(questions, hits, k, contents)
        report.curves[mode] = recall_curve(questions, hits, contents=contents)
    if answers:
        answered = [a.answer for a in assessed]
        report.refusal_curve = refusal_curve(
            questions, [a.refused_by_rule for a in assessed], [a.answerability for a in assessed])
        cited = sorted({c.source_uri for a in answered for c in a.citations})
        report.answers = evaluate_answers(questions, answered, default_groups=groups,
                                          document_groups=kb.document_groups(cited))
        if judge is not None:
            scored = judge_answers(judge, questions, answered)
            report.answers = msgspec.structs.replace(
                report.answers, judge=scored.judge, judged=scored.judged,
                judged_faithfulness=scored.judged_faithfulness)
    return report
