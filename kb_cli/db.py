"""`kb db start|stop|status|url`: the embedded PostgreSQL server."""

from __future__ import annotations

import argparse
import json
import sys

from kb_cli.output import emit
from kb_core.database_server import database_url, embedded_status, start_embedded, stop_embedded
from kb_core.migrations import migrate
from kb_core.settings import Settings

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    if settings.database_url and args.action in ("start", "stop"):
        print("KB_DATABASE_URL is set: the embedded server is not used", file=sys.stderr)
        return 2
    if args.action == "start":
        url = start_embedded(settings)
        migrate(url)
        emit(args, {"url": url}, lambda: print(url))
    elif args.action == "stop":
        stopped = stop_embedded(settings)
        emit(args, {"stopped": stopped},
             lambda: print("stopped" if stopped else "not running", file=sys.stderr))
    elif args.action == "status":
        status = embedded_status(settings)
        emit(args, status, lambda: print(json.dumps(status, ensure_ascii=False, indent=2)))
    else:
        url = database_url(settings)
        emit(args, {"url": url}, lambda: print(url))
    return 0
