"""`kb search`, `kb ask` and `kb eval`: questions put to the engine as a caller with the groups
given on the command line."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kb_cli.answer_output import ask, print_answer, shell_caller, too_long
from kb_cli.output import emit
from kb_cli.progress_display import live_display
from kb_core.settings import Settings
from kb_eval.conversations import is_conversation_set, load_conversations, run_conversations
from kb_eval.conversations import text_report as conversation_report
from kb_eval.judge import make_judge
from kb_eval.question_sets import load_questions
from kb_eval.report.page import render_html
from kb_eval.report.payload import json_payload
from kb_eval.report.plain_text import text_report
from kb_eval.run import run_question_set
from kb_search import MODES, UnknownQueryError, open_knowledge_base

__all__ = ["run_ask", "run_eval", "run_search"]


def run_search(args: argparse.Namespace, settings: Settings) -> int:
    if (args.query is None) == (args.queries is None):
        print("give a QUERY or --queries FILE", file=sys.stderr)
        return 2
    questions = (
        [q.question for q in load_questions(Path(args.queries), need_expected=False)]
        if args.queries else [args.query]
    )
    with open_knowledge_base(settings, answers=False) as kb:
        results = [kb.questions.search(shell_caller(args), q, args.k, args.mode) for q in questions]

    def human() -> None:
        for result in results:
            print(f"# {result.query}  ({result.took_ms} ms)")
            for hit in result.hits:
                where = " ".join(x for x in (hit.path, hit.heading, hit.page or "") if x)
                print(f"{hit.rank:>3}. [{hit.ranks.vector or '-'}|{hit.ranks.keyword or '-'}] "
                      f"{where}\n     {hit.content[:120]!r}")

    emit(args, {"results": results} if args.queries else results[0], human)
    return 0


def run_eval(args: argparse.Namespace, settings: Settings) -> int:
    if is_conversation_set(Path(args.file)):
        return _run_conversations(args, settings)
    questions = load_questions(Path(args.file))
    # --answers alone measures answers only (its JSON is the answers report); with --mode too,
    # both, and the answers report is the "answers" key of the retrieval JSON.
    mode = args.mode or ("hybrid" if not args.answers else None)
    modes = () if mode is None else MODES if mode == "all" else (mode,)
    judge = make_judge(settings.answerer) if args.answers else None
    with open_knowledge_base(settings, answers=args.answers) as kb, live_display(args):
        report = run_question_set(kb, questions, groups=args.groups or (), k=args.k,
                                  modes=modes, answers=args.answers, judge=judge)
    if args.report:
        Path(args.report).write_text(
            render_html(report, sets=[args.file], generated=time.strftime("%Y-%m-%d %H:%M %Z")),
            encoding="utf-8")
        print(f"report written to {args.report}", file=sys.stderr)
    emit(args, json_payload(report, mode), lambda: print(text_report(report)))
    return 0


def run_ask(args: argparse.Namespace, settings: Settings) -> int:
    if reason := too_long(args.question, settings):
        print(f"kb ask: {reason}", file=sys.stderr)
        return 1
    # On a terminal, the stages of the work go to stderr as they happen; --json and a pipe get
    # the answer alone.
    with open_knowledge_base(settings, connections=1) as kb:
        try:
            result = ask(kb, shell_caller(args), args.question, mode=args.mode,
                         follows=args.follows,
                         show_stages=not args.json and sys.stderr.isatty())
        except UnknownQueryError as exc:
            print(f"kb ask: {exc}", file=sys.stderr)
            return 1

    def human() -> None:
        print_answer(result, args.question)
        print(f"  follow up: kb ask QUESTION --follows {result.query_id}", file=sys.stderr)

    emit(args, result, human)
    return 0


def _run_conversations(args: argparse.Namespace, settings: Settings) -> int:
    """A set of conversations: each last turn asked as a follow-up, standalone and alone."""
    conversations = load_conversations(Path(args.file))
    with open_knowledge_base(settings) as kb, live_display(args):
        report = run_conversations(kb, conversations, args.groups or ())
    emit(args, report, lambda: print(conversation_report(report)))
    return 0
