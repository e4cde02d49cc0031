"""`kb corrections list|approve|reject`: the shell's review of employees' corrections. It sees
every correction awaiting a decision, whatever documents it concerns (the page shows a
reviewer only those of documents it may read). An approved correction becomes a learned fact
at once, for the groups every document it corrects grants."""

from __future__ import annotations

import argparse
import getpass
import sys

from kb_cli.output import emit
from kb_core.settings import Settings
from kb_search import CorrectionError, CorrectionForReview, open_knowledge_base

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    with open_knowledge_base(settings, connections=1, answers=False) as kb:
        if args.action == "list":
            waiting = kb.corrections.to_review(None)
            emit(args, {"corrections": waiting}, lambda: _show(waiting))
            return 0
        reviewer = args.reviewer or getpass.getuser()
        try:
            if args.action == "approve":
                kb.corrections.approve(None, reviewer, args.id)
            else:
                kb.corrections.reject(None, reviewer, args.id, args.note)
        except CorrectionError as exc:
            print(exc, file=sys.stderr)
            return 1
    status = "approved" if args.action == "approve" else "rejected"
    emit(args, {"id": args.id, "status": status, "reviewer": reviewer},
         lambda: print(f"correction {args.id} {status} by {reviewer}"))
    return 0


def _show(corrections: list[CorrectionForReview]) -> None:
    if not corrections:
        print("no corrections awaiting review")
    for c in corrections:
        retired = f" (retired {c.retired_at:%Y-%m-%d}: {c.note})" if c.retired_at else ""
        print(f"#{c.id} {c.status}{retired} · {c.submitter_name} · {c.submitted_at:%Y-%m-%d %H:%M}")
        print(f"  質問: {c.question}")
        print(f"  訂正: {c.correction}")
        for p in c.passages:
            state = " [削除済み]" if p.gone else " [変更あり]" if p.changed else ""
            print(f"  出典: {p.path} · {p.heading}{state}")
