"""A question asked from the shell and its answer on the terminal, as `kb ask` and `kb chat` both
show it: the stages of the work on stderr while it runs, then the question as searched (when a
follow-up was read in context), the answer and its citations."""

from __future__ import annotations

import argparse
import getpass
import sys

from kb_core.callers import Caller
from kb_core.settings import Settings
from kb_search import AskMode, AskResult, KnowledgeBase, Stage

__all__ = ["ask", "print_answer", "shell_caller", "too_long"]


def shell_caller(args: argparse.Namespace) -> Caller:
    """The shell's user, with the groups given on the command line."""
    return Caller(kind="cli", subject=getpass.getuser(), groups=tuple(args.groups))


def too_long(question: str, settings: Settings) -> str | None:
    """Why `question` is refused (longer than KB_MAX_QUESTION_CHARS, as every door refuses it),
    or None."""
    limit = settings.service.max_question_chars
    if len(question) <= limit:
        return None
    return (f"the question has {len(question)} characters; the limit is {limit} "
            "(KB_MAX_QUESTION_CHARS)")


def ask(kb: KnowledgeBase, caller: Caller, question: str, *, mode: AskMode,
        follows: str | None, show_stages: bool) -> AskResult:
    """The answer to `question`; with `show_stages`, its stages printed on stderr as they
    happen. UnknownQueryError when `follows` names no answer this caller received."""
    if not show_stages:
        return kb.questions.ask(caller, question, mode=mode, follows=follows)
    for event in kb.questions.ask_events(caller, question, mode=mode, follows=follows):
        if isinstance(event, Stage):
            print(_stage_line(event), file=sys.stderr, flush=True)
    assert isinstance(event, AskResult)
    return event


def print_answer(result: AskResult, question: str) -> None:
    """The answer as a person reads it: how a follow-up was read, the text, its citations
    (stdout) and its warnings (stderr)."""
    if result.asked_as != question:
        print(f"（「{result.asked_as}」として検索しました）")
    print(result.answer)
    for c in result.citations:
        where = " ".join(x for x in (c.path, c.heading, c.page or "") if x)
        print(f"  [{c.n}] {where}")
    sys.stdout.flush()
    for warning in result.warnings:
        print(f"  warning: {warning}", file=sys.stderr)


def _stage_line(stage: Stage) -> str:
    if stage.stage == "plan":
        labels = " / ".join(p.label for p in stage.parts or [])
        return f"… {len(stage.parts or [])}つに分けて調べます: {labels}" if labels else "… 検索中"
    if stage.stage == "part":
        return (f"  ({(stage.index or 0) + 1}) " + ("見つかりました" if stage.found
                                                    else "該当なし") + f"（{stage.hits}件）")
    return "… 回答を作成中"
