"""The configured question sets measured on one index, through the engine's face and with no
Dagster: the retrieval_evaluation asset measures the live index with it, and a rebuilt index
generation is measured the same way, beside the live one, before it is published."""

from kb_core.database import connect
from kb_core.embeddings import make_embedder
from kb_core.generations import use_generation
from kb_core.index_model import check_index_model
from kb_core.settings import Settings
from kb_eval.judge import make_judge
from kb_eval.questions import load_question_sets
from kb_eval.run import EvalReport, run_question_set
from kb_search import open_knowledge_base

__all__ = ["evaluate_index"]


def evaluate_index(settings: Settings, *, generation: int | None = None,
                   answers: bool = True) -> EvalReport:
    """The `run_question_set` report of the configured question sets on the live index of the
    database `settings.database_url` names, or on its rebuilt `generation`, with the knowledge
    base `kb search` and `kb ask` open; an LLM answerer also judges the answers' faithfulness
    (model-judged, never a check). Raises IndexModelMismatchError when the index was built with
    another embedding model than the one configured."""
    questions = load_question_sets(settings.evaluation.sets)
    with connect(settings.database_url, autocommit=True) as conn:
        use_generation(conn, generation)
        check_index_model(conn, make_embedder(settings.embedder))
    with open_knowledge_base(settings, generation=generation, answers=answers) as kb:
        return run_question_set(kb, questions, groups=settings.evaluation.groups,
                                answers=answers,
                                judge=make_judge(settings.answerer) if answers else None)
