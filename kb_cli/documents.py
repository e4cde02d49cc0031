"""`kb docs` and `kb failures`: what the index holds, and the files it could not take."""

from __future__ import annotations

import argparse

from kb_cli.output import emit
from kb_core.database import connect
from kb_core.migrations import prepare_database
from kb_core.queries import query
from kb_core.settings import Settings

__all__ = ["run_docs", "run_failures"]


def run_docs(args: argparse.Namespace, settings: Settings) -> int:
    with connect(prepare_database(settings).database_url) as conn:
        cur = conn.execute(query("list_documents"))
        names = [c.name for c in cur.description]
        rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def human() -> None:
        for r in rows:
            print(f"{r['path']}\t{','.join(r['allowed_groups']) or '(nobody)'}\t"
                  f"{r['chunks']} chunks\t{r['revision_date']}\t{r['ingested_at']:%Y-%m-%d %H:%M}")

    emit(args, {"documents": rows}, human)
    return 0


def run_failures(args: argparse.Namespace, settings: Settings) -> int:
    with connect(prepare_database(settings).database_url) as conn:
        rows = [
            {"path": p, "stage": s, "error": e, "failed_at": f}
            for p, s, e, f in conn.execute(query("open_failures"))
        ]

    def human() -> None:
        for r in rows:
            print(f"{r['path']}\t{r['stage']}\t{r['error']}\t{r['failed_at']:%Y-%m-%d %H:%M}")

    emit(args, {"failures": rows}, human)
    return 0
