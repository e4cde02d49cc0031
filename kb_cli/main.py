"""The `kb` command line (docs/cli.md): results on stdout (one JSON object with --json), progress
and logs on stderr.

The parser is all this module holds; each command's module is imported only when that command
runs (`handler` names it), so `kb --help` and `kb db status` do not load Dagster, the engine or
the HTTP service.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from kb_cli.logs import configure_logging
from kb_cli.output import groups
from kb_cli.parent_watch import ParentAtStart
from kb_core.settings import Settings

__all__ = ["build_parser", "main"]


def _group(sub: argparse._SubParsersAction, name: str, help_text: str,
           examples: tuple[str, ...]) -> argparse.ArgumentParser:
    """A subcommand whose `--help` ends with `examples`, command lines a person can run."""
    return sub.add_parser(name, help=help_text, description=help_text,
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="examples:\n" + "\n".join(f"  {e}" for e in examples))


def _command(sub: argparse._SubParsersAction, name: str, handler: str, help_text: str,
             examples: tuple[str, ...], *, json: bool = True) -> argparse.ArgumentParser:
    """A subcommand run by `handler` ("module:function" under kb_cli)."""
    parser = _group(sub, name, help_text, examples)
    parser.set_defaults(handler=handler)
    if json:
        parser.add_argument("--json", action="store_true")
    else:
        parser.set_defaults(json=False)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The `kb` parser with every command (docs/cli.md is generated from it)."""
    parser = argparse.ArgumentParser(prog="kb", description="社内ナレッジ検索")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="every log line on stderr too (all go to $KB_HOME/logs/kb.log)")
    sub = parser.add_subparsers(dest="command", required=True)

    up = _command(sub, "up", "up:run", "database, Dagster UI and daemon, query service",
                  ("kb up", "KB_DOCS_DIRS=/srv/share/規程 kb up --dagster-port 3001 --port 8001"),
                  json=False)
    up.add_argument("--dagster-port", type=int, default=3000)
    up.add_argument("--port", type=int, default=8000)
    up.add_argument("--stop-with-parent", dest="parent", action=ParentAtStart,
                    help="stop everything also when the parent process ends, or starts to "
                         "end on SIGINT, SIGTERM or SIGHUP without passing it on, as make "
                         "does (`make up` uses it); not for `kb up &` from a shell, which "
                         "is to outlive the shell")
    _dev_user_arguments(up)

    db = _command(sub, "db", "db:run", "the embedded PostgreSQL server",
                  ("kb db start", "kb db status --json"))
    db.add_argument("action", choices=["start", "stop", "status", "url"])

    ingest = _command(sub, "ingest", "ingest:run",
                      "ingest files or folders through the asset graph",
                      ("kb ingest samples/docs",
                       "kb ingest ~/共有/人事 --groups hr,managers --json"))
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument("--groups", type=groups, default=None,
                        help="groups for files without an access rule of their own")

    _command(sub, "status", "status:run", "this installation on one screen: database, index, "
             "groups, sensor, service, last evaluation", ("kb status", "kb status --json"))
    _command(sub, "docs", "documents:run_docs", "list indexed documents",
             ("kb docs", "kb docs --json"))
    _command(sub, "failures", "documents:run_failures",
             "list files that could not be ingested", ("kb failures", "kb failures --json"))

    search = _command(sub, "search", "questions:run_search",
                      "hybrid search as a caller with these groups",
                      ("kb search \"ZP-2041の保証期間は？\" --groups all-employees",
                       "kb search --queries questions.jsonl --groups engineering --json"))
    search.add_argument("query", nargs="?")
    search.add_argument("--queries", help="a JSONL file of questions, searched in one process")
    search.add_argument("--groups", type=groups, required=True)
    search.add_argument("--k", type=int, default=10)
    search.add_argument("--mode", choices=["hybrid", "vector", "keyword", "graph"],
                        default="hybrid")

    evaluation = _command(sub, "eval", "questions:run_eval",
                          "retrieval metrics over a question set",
                          ("kb eval samples/eval.jsonl --groups all-employees --mode all",
                           "kb eval samples/eval.jsonl --answers --report eval.html"))
    evaluation.add_argument("file")
    evaluation.add_argument("--groups", type=groups, default=None,
                            help="groups for lines without their own")
    evaluation.add_argument("--k", type=int, default=5)
    evaluation.add_argument("--mode", choices=["hybrid", "vector", "keyword", "graph", "all"],
                            default=None, help="search mode(s) to measure (default hybrid)")
    evaluation.add_argument("--answers", action="store_true",
                            help="measure answers (citations, not found, numbers); alone, "
                                 "instead of retrieval, with --mode as well")
    evaluation.add_argument("--report", default=None, metavar="OUT.html",
                            help="also write the report as one self-contained HTML file")

    ask = _command(sub, "ask", "questions:run_ask", "a grounded answer with citations",
                   ("kb ask \"有給休暇は何日前までに申請が必要ですか\" --groups all-employees",
                    "kb ask \"半日単位でも取れる？\" --groups all-employees --follows QUERY_ID"))
    ask.add_argument("question")
    _ask_arguments(ask, "the question follows it and is read in that conversation")
    chat = _command(sub, "chat", "chat:run",
                    "a conversation at the prompt: each question follows the answer before it "
                    "(/new starts a new conversation, Ctrl-D ends)",
                    ("kb chat --groups all-employees", "kb chat --groups hr --mode deep"),
                    json=False)
    _ask_arguments(chat, "the first question follows it (a conversation begun with kb ask)")

    backup = _command(sub, "backup", "backup:backup",
                      "back up the embedded installation to one file (both databases)",
                      ("kb backup /srv/backups/kb-2026-12-05.kbbackup",
                       "kb backup ~/kb.kbbackup --json"))
    backup.add_argument("path", type=Path, help="the file to write (never overwritten)")
    restore = _command(sub, "restore", "backup:restore",
                       "restore a backup into a new, empty KB_HOME",
                       ("KB_HOME=/srv/kb-new kb restore /srv/backups/kb-2026-12-05.kbbackup",
                        "kb restore kb.kbbackup --map /mnt/old/規程=/srv/share/規程 --json"))
    restore.add_argument("path", type=Path, help="a file written by `kb backup`")
    restore.add_argument("--map", action="append", default=[], metavar="OLD=NEW",
                         help="a watched folder now mounted at another path: its documents "
                              "keep their index (no re-embedding); repeat for each folder")

    gaps = _command(sub, "gaps", "gaps:run",
                    "the knowledge-gap report: questions no document answers, by topic; "
                    "documents going stale or never cited",
                    ("kb gaps --days 90 --json", "kb gaps --groups hr,kb-reviewers"))
    gaps.add_argument("--days", type=int, default=30, help="the window (default 30 days)")
    gaps.add_argument("--groups", type=groups, default=None,
                      help="show only what a reviewer of these groups sees on the page")

    entities = _command(sub, "entities", "entities:run",
                        "an entity's card: where the passages of these groups name it, by "
                        "document, and what they name it with",
                        ("kb entities show QC-2031 --groups engineering",
                         "kb entities show 湖西工場 --groups all-employees --json"))
    entities.add_argument("action", choices=["show"])
    entities.add_argument("name", help="its name, or the beginning of it")
    entities.add_argument("--groups", type=groups, required=True)

    log_cmd = _command(sub, "log", "query_log:run", "the query log",
                       ("kb log purge", "kb log purge --days 30"))
    log_cmd.add_argument("action", choices=["purge"])
    log_cmd.add_argument("--days", type=int, default=None,
                         help="keep this many days (default KB_QUERY_LOG_RETENTION_DAYS or 90)")

    token = _group(sub, "token", "API tokens for apps",
                   ("kb token create portal --groups all-employees", "kb token list"))
    actions = token.add_subparsers(dest="action", required=True)
    create = _command(actions, "create", "tokens:run", "make a token (printed once) for an app",
                     ("kb token create portal --groups all-employees",))
    create.add_argument("name")
    create.add_argument("--groups", type=groups, required=True,
                        help="the groups whose documents the app may read")
    _command(actions, "list", "tokens:run", "list tokens (never the tokens themselves)",
             ("kb token list",))
    revoke = _command(actions, "revoke", "tokens:run", "revoke the live token of that name",
                     ("kb token revoke portal",))
    revoke.add_argument("name")

    corrections = _group(sub, "corrections", "employees' corrections awaiting review",
                         ("kb corrections list", "kb corrections approve 12"))
    actions = corrections.add_subparsers(dest="action", required=True)
    _command(actions, "list", "corrections:run",
             "corrections awaiting review: new ones, and approved ones whose document changed",
             ("kb corrections list", "kb corrections list --json"))
    approve = _command(actions, "approve", "corrections:run",
                       "make a correction a learned fact, for the groups of every document it "
                       "corrects", ("kb corrections approve 12 --reviewer 佐藤",))
    reject = _command(actions, "reject", "corrections:run",
                      "refuse a correction (an approved one stops being served)",
                      ("kb corrections reject 12 --note 規程の誤読",))
    for decision in (approve, reject):
        decision.add_argument("id", type=int)
        decision.add_argument("--reviewer", default=None,
                              help="the name cited with the fact (default: your user name)")
    reject.add_argument("--note", default=None, help="why, for the record")

    gen = _group(sub, "generation", "index generations: list, rebuild, discard",
                 ("kb generation list", "kb generation rebuild"))
    actions = gen.add_subparsers(dest="action", required=True)
    _command(actions, "list", "generations:run",
             "every generation with its state and gate figures",
             ("kb generation list", "kb generation list --json"))
    _command(actions, "rebuild", "generations:run",
             "rebuild every document into a new generation, evaluate it, and publish it if its "
             "gates pass", ("kb generation rebuild", "kb generation rebuild --json"))
    discard = _command(actions, "discard", "generations:run",
                       "drop a generation that is not live", ("kb generation discard 2",))
    discard.add_argument("id", type=int)

    serve = _command(sub, "serve", "serve:run", "the query service alone",
                     ("kb serve", "kb serve --port 8080"), json=False)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    _dev_user_arguments(serve)

    mcp = _command(sub, "mcp", "mcp:run",
                   "the knowledge base as an MCP server on stdin/stdout, for an AI assistant or "
                   "IDE that starts it, reading as the app of an API token",
                   ("kb mcp --token-file ~/.config/kb-search/token",
                    "KB_DATABASE_URL=postgresql://kb@db.internal/kb kb mcp --token-file "
                    "/run/secrets/kb-token"), json=False)
    mcp.add_argument("--token-file", required=True, metavar="PATH",
                     help="a file holding the API token (kb token create NAME --groups ...) "
                          "whose groups the assistant reads with")
    return parser


def _ask_arguments(parser: argparse.ArgumentParser, follows: str) -> None:
    """The options of `kb ask` and `kb chat`: the caller's groups, the mode, `--follows`."""
    parser.add_argument("--groups", type=groups, required=True)
    parser.add_argument("--mode", choices=["auto", "flash", "deep"], default="auto",
                        help="auto: part by part when the question asks several things "
                             "(default); flash: whole; deep: part by part whenever it has parts")
    parser.add_argument("--follows", metavar="QUERY_ID", default=None,
                        help="the query_id of an earlier answer this user received (kb ask, "
                             f"kb chat): {follows}")


def _dev_user_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dev-user", metavar="NAME", default=None,
                        help="development sign-in: the page signs everyone in as NAME "
                             "(loopback addresses only; labelled on every page)")
    parser.add_argument("--groups", type=groups, default=None,
                        help="the development user's groups, e.g. all-employees")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings.from_env()
    configure_logging(settings, args.verbose)
    module, function = args.handler.split(":")
    run = getattr(importlib.import_module(f"kb_cli.{module}"), function)
    return run(args, settings)


if __name__ == "__main__":
    sys.exit(main())
