"""The configured question sets measured on one index, through one database connection and with
no Dagster: the retrieval_evaluation asset measures the live index with it, and a rebuilt index
generation is measured the same way, beside the live one, before it is published."""

import psycopg

from kb_core.index_model import check_index_model
from kb_core.settings import Settings
from kb_search.answerers.judge import make_judge
from kb_search.engine import build_engine, build_searcher
from kb_search.evaluation import EvalReport, load_question_sets, run_question_set
from kb_search.search import configure_search_session

__all__ = ["evaluate_index"]


def evaluate_index(conn: psycopg.Connection, settings: Settings, *,
                   answers: bool = True) -> EvalReport:
    """The `run_question_set` report of the configured question sets on `conn` (an autocommit
    connection to one index), with the engine `kb search` and `kb ask` build; an LLM answerer
    also judges the answers' faithfulness (model-judged, never a check). Raises
    IndexModelMismatchError when the index was built with another embedding model."""
    questions = load_question_sets(settings.evaluation.sets)
    engine = build_engine(settings) if answers else None
    searcher = engine.searcher if engine else build_searcher(settings)
    check_index_model(conn, searcher.embedder_for(searcher.configured))
    configure_search_session(conn)
    searcher.follow(conn)
    return run_question_set(conn, questions, searcher, engine,
                            groups=settings.evaluation.groups,
                            judge=make_judge(settings.answerer) if answers else None)
