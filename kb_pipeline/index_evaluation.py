"""The configured question sets measured on one index, through the engine's face and with no
Dagster: the retrieval_evaluation asset measures the live index with it, and a rebuilt index
generation is measured the same way, beside the live one, before it is published."""

from pathlib import Path

from kb_core.database import connect
from kb_core.embeddings import make_embedder
from kb_core.generations import use_generation
from kb_core.index_model import check_index_model
from kb_core.settings import DEFAULT_EVAL_SET, REPO_ROOT, EvalSettings, Settings
from kb_eval.conversations import is_conversation_set, load_conversations, run_conversations
from kb_eval.judge import make_judge
from kb_eval.question_sets import load_question_sets
from kb_eval.run import EvalReport, run_question_set
from kb_search import open_knowledge_base

__all__ = ["CONVERSATION_EVAL_SET", "MULTIPART_EVAL_SET", "evaluate_index", "question_sets"]

# The team's multi-part questions (Deep mode) and conversations (follow-ups), replayed beside
# the default set. Reported, never gating: kb_eval/run.py counts them in no figure a check or a
# publication gate reads.
MULTIPART_EVAL_SET = REPO_ROOT / "samples" / "eval_multipart.jsonl"
CONVERSATION_EVAL_SET = REPO_ROOT / "samples" / "eval_conversations.jsonl"


def question_sets(settings: EvalSettings) -> tuple[Path, ...]:
    """The question sets an evaluation replays: those of KB_EVAL_SETS, and the multi-part and
    conversation sets beside the default set when that is all they are (KB_EVAL_SETS unset)."""
    if settings.sets == (DEFAULT_EVAL_SET,):
        return (DEFAULT_EVAL_SET, MULTIPART_EVAL_SET, CONVERSATION_EVAL_SET)
    return settings.sets


def evaluate_index(settings: Settings, *, generation: int | None = None,
                   answers: bool = True) -> EvalReport:
    """The `run_question_set` report of the configured question sets (`question_sets`) on the
    live index of the database `settings.database_url` names, or on its rebuilt `generation`,
    with the knowledge base `kb search` and `kb ask` open; an LLM answerer also judges the
    answers' faithfulness (model-judged, never a check). With answers, the conversation sets
    among them (lines with "turns") are scored too (`run_conversations`), as its
    `conversations`. Raises IndexModelMismatchError when the index was built with another
    embedding model than the one configured."""
    paths = question_sets(settings.evaluation)
    conversation_sets = [p for p in paths if is_conversation_set(p)]
    questions = load_question_sets(p for p in paths if p not in conversation_sets)
    conversations = [c for p in conversation_sets for c in load_conversations(p)]
    groups = settings.evaluation.groups
    with connect(settings.database_url, autocommit=True) as conn:
        use_generation(conn, generation)
        check_index_model(conn, make_embedder(settings.embedder))
    with open_knowledge_base(settings, generation=generation, answers=answers) as kb:
        report = run_question_set(kb, questions, groups=groups, answers=answers,
                                  judge=make_judge(settings.answerer) if answers else None)
        if answers and conversations:
            report.conversations = run_conversations(kb, conversations, groups)
    return report
