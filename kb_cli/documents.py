"""`kb docs` and `kb failures`: what the index holds, and the files it could not take."""

from __future__ import annotations

import argparse

from kb_cli.output import emit
from kb_core.settings import Settings
from kb_search import open_knowledge_base

__all__ = ["run_docs", "run_failures"]


def run_docs(args: argparse.Namespace, settings: Settings) -> int:
    with open_knowledge_base(settings, connections=1, answers=False) as kb:
        documents = kb.operations.documents()

    def human() -> None:
        for d in documents:
            print(f"{d.path}\t{','.join(d.allowed_groups) or '(nobody)'}\t"
                  f"{d.chunks} chunks\t{d.revision_date}\t{d.ingested_at:%Y-%m-%d %H:%M}")

    emit(args, {"documents": documents}, human)
    return 0


def run_failures(args: argparse.Namespace, settings: Settings) -> int:
    with open_knowledge_base(settings, connections=1, answers=False) as kb:
        failures = kb.operations.failures()

    def human() -> None:
        for f in failures:
            print(f"{f.path}\t{f.stage}\t{f.error}\t{f.failed_at:%Y-%m-%d %H:%M}")

    emit(args, {"failures": failures}, human)
    return 0
