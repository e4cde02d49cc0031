"""`kb gaps`: the knowledge-gap report at the shell. It shows every question and document, as
the operator holds the database anyway; `--groups` shows what a reviewer of those groups sees
on the page (a question only when every group of its asker is one of them, a document only
when they may read it)."""

from __future__ import annotations

import argparse

from kb_cli.output import emit
from kb_core.callers import Caller
from kb_core.settings import Settings
from kb_search import GapReport, open_knowledge_base

__all__ = ["run"]

SHOWN = 10  # lines of each list printed; --json holds them all


def run(args: argparse.Namespace, settings: Settings) -> int:
    reviewer = (Caller(kind="cli", subject="kb gaps", groups=args.groups)
                if args.groups else None)
    with open_knowledge_base(settings, connections=1, answers=False) as kb:
        report = kb.gaps.report(reviewer, args.days)
    emit(args, report, lambda: _show(report))
    return 0


def _show(report: GapReport) -> None:
    counts = report.counts()
    print(f"the last {report.days} days (since {report.since.astimezone():%Y-%m-%d}): "
          f"{counts['not_found']} questions not found, {counts['unhelpful']} answers marked "
          f"unhelpful, in {counts['topics']} topics")
    for n, topic in enumerate(report.topics[:SHOWN], 1):
        unhelpful = f" ({topic.unhelpful} marked unhelpful)" if topic.unhelpful else ""
        print(f"\n{n}. asked {_times(topic.asked)}{unhelpful}")
        for q in topic.questions[:3]:
            print(f"   「{q.question}」" + (f" ×{q.asked}" if q.asked > 1 else ""))
        if len(topic.questions) > 3:
            print(f"   and {len(topic.questions) - 3} more questions")
        for d in topic.closest:
            print(f"   closest: {d.path} (retrieved {_times(d.retrieved)})")
    _more(len(report.topics), "topics")
    print(f"\ncited, and unchanged for over a year: {len(report.stale)} documents")
    for d in report.stale[:SHOWN]:
        print(f"  {d.path} · cited {_times(d.cited)} · unchanged since "
              f"{d.unchanged_since.astimezone():%Y-%m-%d}")
    _more(len(report.stale), "documents")
    recorded = (f" (citations are recorded since {report.citations_since.astimezone():%Y-%m-%d})"
                if report.citations_since > report.since else "")
    print(f"\nnever cited{recorded}: {len(report.never_cited)} documents")
    for d in report.never_cited[:SHOWN]:
        print(f"  {d.path}")
    _more(len(report.never_cited), "documents")


def _more(total: int, what: str) -> None:
    if total > SHOWN:
        print(f"  and {total - SHOWN} more {what} (all of them with --json)")


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"
