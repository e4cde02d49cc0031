"""`kb log purge`: drop query log entries past their retention."""

from __future__ import annotations

import argparse

from kb_cli.output import emit
from kb_core.settings import Settings
from kb_search import open_knowledge_base

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    days = args.days if args.days is not None else settings.service.query_log_retention_days
    with open_knowledge_base(settings, connections=1, answers=False) as kb:
        purged = kb.query_log.purge(days)
    emit(args, {"purged": purged, "days": days},
         lambda: print(f"purged {purged} query log entries older than {days} days"))
    return 0
