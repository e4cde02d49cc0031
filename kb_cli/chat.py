"""`kb chat`: a conversation at the prompt. Each question is answered as `kb ask` shows it and
follows the answer before it (its query_id), so 「それは誰に出すの？」 is read in that
conversation; /new starts another. Line editing and this session's questions come from readline;
no question or answer is written anywhere but the query log, which keeps them for its retention.
"""

from __future__ import annotations

import argparse
import readline  # noqa: F401  (importing it gives input() line editing and history)
import sys

from kb_cli.answer_output import ask, print_answer, shell_caller, too_long
from kb_core.callers import Caller
from kb_core.settings import Settings
from kb_search import AskMode, KnowledgeBase, UnknownQueryError, open_knowledge_base

__all__ = ["run"]

BANNER = "質問を入力してください（/new 新しい会話、/exit または Ctrl-D 終了）"
PROMPTS = {False: "質問> ", True: "続けて> "}  # by whether the next question is a follow-up
NEW_CONVERSATION = "（新しい会話）"
EARLIER_ANSWER_GONE = ("続きにする回答が見つかりません（記録の保存期間を過ぎて削除されたなど）。"
                       "新しい会話として質問します。")
INTERRUPTED = "（中断しました）"


def run(args: argparse.Namespace, settings: Settings) -> int:
    caller = shell_caller(args)
    show_stages = sys.stderr.isatty()
    prompts = PROMPTS if sys.stdin.isatty() else {False: "", True: ""}  # questions from a pipe
    with open_knowledge_base(settings, connections=1) as kb:
        print(BANNER, file=sys.stderr)
        follows: str | None = args.follows
        while True:
            try:
                line = input(prompts[follows is not None]).strip()
            except EOFError:  # Ctrl-D
                print(file=sys.stderr)
                return 0
            except KeyboardInterrupt:  # Ctrl-C at the prompt: the line is dropped
                print(file=sys.stderr)
                continue
            if not line:
                continue
            if line.startswith("/"):
                if line in ("/exit", "/quit"):
                    return 0
                if line == "/new":
                    follows = None
                    print(NEW_CONVERSATION, file=sys.stderr)
                else:
                    print(BANNER, file=sys.stderr)
                continue
            follows = _turn(kb, caller, line, follows, args.mode, settings, show_stages)


def _turn(kb: KnowledgeBase, caller: Caller, question: str, follows: str | None,
          mode: AskMode, settings: Settings, show_stages: bool) -> str | None:
    """Ask `question` after the answer `follows` and show the answer; return what the next
    question follows (unchanged when this one was refused or interrupted)."""
    if reason := too_long(question, settings):
        print(f"kb chat: {reason}", file=sys.stderr)
        return follows
    try:
        try:
            result = ask(kb, caller, question, mode=mode, follows=follows,
                         show_stages=show_stages)
        except UnknownQueryError:
            # The earlier answer left the query log (its retention): start over.
            print(EARLIER_ANSWER_GONE, file=sys.stderr)
            result = ask(kb, caller, question, mode=mode, follows=None,
                         show_stages=show_stages)
        print_answer(result, question)
    except KeyboardInterrupt:  # Ctrl-C while it works: back to the prompt, as before it
        print(INTERRUPTED, file=sys.stderr)
        return follows
    return result.query_id
