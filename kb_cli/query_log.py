"""`kb log purge`: drop query log entries past their retention."""

from __future__ import annotations

import argparse

from kb_cli.output import emit
from kb_core.database import connect
from kb_core.migrations import prepare_database
from kb_core.queries import query
from kb_core.settings import Settings

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    days = args.days if args.days is not None else settings.service.query_log_retention_days
    with connect(prepare_database(settings).database_url, autocommit=True) as conn:
        purged = conn.execute(query("purge_query_log"), {"days": days}).rowcount
    emit(args, {"purged": purged, "days": days},
         lambda: print(f"purged {purged} query log entries older than {days} days"))
    return 0
