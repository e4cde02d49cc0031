"""`kb search`, `kb ask` and `kb eval`: questions put to the engine as a caller with the groups
given on the command line."""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from pathlib import Path

import psycopg
from psycopg_pool import ConnectionPool

from kb_cli.output import emit
from kb_cli.progress_display import live_display
from kb_core.callers import Caller
from kb_core.database import connect
from kb_core.migrations import prepare_database
from kb_core.settings import Settings
from kb_search.answerers.judge import make_judge
from kb_search.engine import build_engine, build_searcher
from kb_search.evaluation import load_questions, run_question_set
from kb_search.knowledge import KnowledgeService
from kb_search.report import json_payload, render_html, text_report
from kb_search.search import MODES, Searcher, configure_search_session, pooled_search_connection

__all__ = ["run_ask", "run_eval", "run_search"]


def _search_connection(settings: Settings, searcher: Searcher) -> psycopg.Connection:
    """A connection configured for search, with `searcher` following its index's model."""
    conn = connect(settings.database_url, autocommit=True)
    configure_search_session(conn)
    searcher.follow(conn)
    return conn


def run_search(args: argparse.Namespace, settings: Settings) -> int:
    if (args.query is None) == (args.queries is None):
        print("give a QUERY or --queries FILE", file=sys.stderr)
        return 2
    settings = prepare_database(settings)
    searcher = build_searcher(settings)
    with _search_connection(settings, searcher) as conn:
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

    emit(args, {"results": results} if args.queries else results[0], human)
    return 0


def run_eval(args: argparse.Namespace, settings: Settings) -> int:
    questions = load_questions(Path(args.file))
    # --answers alone measures answers only (its JSON is the answers report); with --mode too,
    # both, and the answers report is the "answers" key of the retrieval JSON.
    mode = args.mode or ("hybrid" if not args.answers else None)
    modes = () if mode is None else MODES if mode == "all" else (mode,)
    settings = prepare_database(settings)
    engine = build_engine(settings) if args.answers else None
    searcher = engine.searcher if engine else build_searcher(settings)
    judge = make_judge(settings.answerer) if args.answers else None
    with _search_connection(settings, searcher) as conn, live_display(args):
        report = run_question_set(conn, questions, searcher, engine, groups=args.groups or (),
                                  k=args.k, modes=modes, judge=judge)
    if args.report:
        Path(args.report).write_text(
            render_html(report, sets=[args.file], generated=time.strftime("%Y-%m-%d %H:%M %Z")),
            encoding="utf-8")
        print(f"report written to {args.report}", file=sys.stderr)
    emit(args, json_payload(report, mode), lambda: print(text_report(report)))
    return 0


def run_ask(args: argparse.Namespace, settings: Settings) -> int:
    settings = prepare_database(settings)
    caller = Caller(kind="cli", subject=getpass.getuser(), groups=tuple(args.groups))
    with ConnectionPool(settings.database_url, min_size=1, max_size=1,
                        configure=pooled_search_connection) as pool:
        result = KnowledgeService(pool, build_engine(settings)).ask(caller, args.question)

    def human() -> None:
        print(result.answer)
        for c in result.citations:
            where = " ".join(x for x in (c.path, c.heading, c.page or "") if x)
            print(f"  [{c.n}] {where}")
        for warning in result.warnings:
            print(f"  warning: {warning}", file=sys.stderr)

    emit(args, result, human)
    return 0
