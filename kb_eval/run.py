"""A question set run against one knowledge base: every question searched in each mode and,
when asked, answered, each as a caller with the question's own groups, through the engine's
face (`KnowledgeBase`). The same run serves `kb eval`, the Dagster evaluation of the live index
and that of a rebuilt generation not yet live (opened with `generation=`).

A multi-part question has no one document to find: it is not searched, and with answers it is
answered (mode "auto") and each of its parts asked alone (mode "flash"), for the figures of
kb_eval/parts.py, which nothing else counts."""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec

from kb_core.callers import Caller
from kb_core.progress import report as report_progress
from kb_eval.answers import AnswerMetrics, evaluate_answers
from kb_eval.conversations import ConversationReport
from kb_eval.judge import FaithfulnessJudge, judge_answers
from kb_eval.parts import PartsAsked, PartsMetrics, evaluate_parts
from kb_eval.question_sets import EvalQuestion
from kb_eval.refusals import RefusalPoint, refusal_curve
from kb_eval.retrieval import DEPTH, ModeMetrics, evaluate, recall_curve
from kb_search import MODES, AskMode, AskResult, Assessment, KnowledgeBase, Mode, SearchHit

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
    # The multi-part questions, with answers; the figures above count the single ones alone.
    parts: PartsMetrics | None = None
    # The conversation sets' last turns (kb_eval/conversations.py), where an evaluation asks
    # them (the Dagster evaluation); reported beside the figures above, which count none.
    conversations: ConversationReport | None = None


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
    """Each single (not multi-part) question searched in each of `modes` (and, with `answers`,
    answered) as an "eval" caller with the question's own "groups", else `groups`; with a
    `judge` too, the found answers are scored for faithfulness (`judge_answers`). The report's
    `answers` is None without `answers`; its `parts` is None without them or without
    multi-part questions."""
    fetch = max(k, DEPTH)  # MRR@10 and nDCG@10 need ten hits whatever k is
    singles = [q for q in questions if not q.parts]
    multi = [q for q in questions if q.parts]
    report = EvalReport(questions=len(questions), k=k, modes={}, curves={})
    report_progress("questions", count=len(singles) * (len(modes) + answers)
                    + answers * sum(1 + len(q.parts or []) for q in multi))
    # Question by question, so that its embedding, kept by the engine for its latest
    # questions, serves every mode and the answer: a set's questions outnumber what it keeps.
    found: dict[Mode, list[list[SearchHit]]] = {mode: [] for mode in modes}
    assessed: list[Assessment] = []
    in_parts: list[PartsAsked] = []
    for q in questions:
        caller = eval_caller(q, groups)
        if q.parts:
            if answers:
                in_parts.append(_ask_in_parts(kb, caller, q))
            continue
        for mode in modes:
            found[mode].append(kb.questions.search(caller, q.question, fetch, mode).hits)
            report_progress("question")
        if answers:
            assessed.append(kb.questions.assess(caller, q.question))
            report_progress("question")
    for mode, results in found.items():
        hits = [[h.source_uri for h in hits] for hits in results]
        contents = [[h.content for h in hits] for hits in results]
        report.modes[mode] = evaluate(singles, hits, k, contents)
        report.curves[mode] = recall_curve(singles, hits, contents=contents)
    if answers:
        answered = [a.answer for a in assessed]
        report.refusal_curve = refusal_curve(
            singles, [a.refused_by_rule for a in assessed], [a.answerability for a in assessed])
        cited = sorted({c.source_uri for a in answered for c in a.citations})
        report.answers = evaluate_answers(singles, answered, default_groups=groups,
                                          document_groups=kb.sources.document_groups(cited))
        if judge is not None:
            scored = judge_answers(judge, singles, answered)
            report.answers = msgspec.structs.replace(
                report.answers, judge=scored.judge, judged=scored.judged,
                judged_faithfulness=scored.judged_faithfulness)
        if multi:
            report.parts = evaluate_parts(multi, in_parts, answered)
    return report


def _ask_in_parts(kb: KnowledgeBase, caller: Caller, question: EvalQuestion) -> PartsAsked:
    """The question answered as the engine chooses (mode "auto"), and each of its parts asked
    alone, answered whole (mode "flash")."""
    answer, took_ms = _timed_answer(kb, caller, question.question, "auto")
    separate = [_timed_answer(kb, caller, part.question, "flash") for part in question.parts or []]
    return PartsAsked(answer=answer, took_ms=took_ms, separate=[a for a, _ in separate],
                      separate_ms=[ms for _, ms in separate])


def _timed_answer(kb: KnowledgeBase, caller: Caller, question: str,
                  mode: AskMode) -> tuple[AskResult, float]:
    """The answer to `question` in `mode` (not cached, not logged), and the milliseconds it took."""
    started = time.perf_counter()
    answer = kb.questions.assess(caller, question, mode=mode).answer
    took_ms = round((time.perf_counter() - started) * 1000, 1)
    assert answer is not None  # assessed with its answer
    report_progress("question")
    return answer, took_ms
