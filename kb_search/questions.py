"""Questions: search, answers (whole, or as they are worked out and written), and assessments
for measuring the engine, for a verified caller whose groups filter every passage inside SQL.

Synchronous: retrieval embeds the question and the extractive answerer scores sentences, CPU
work the HTTP door runs in worker threads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Literal

import msgspec

from kb_core.callers import Caller
from kb_core.read_routing import ReadRouter
from kb_search.answer_cache import AnswerCache
from kb_search.answer_flow import (
    AnswerEvent,
    AnswerFlow,
    AskMode,
    Conversation,
    index_version,
)
from kb_search.answerers.chat_answerer import ChatAnswerer
from kb_search.grounded_answers import AskResult, GroundedAnswers
from kb_search.query_log import LoggedTurn, QueryLog
from kb_search.search import Mode, SearchResult

__all__ = ["Assessment", "Questions"]


class Assessment(msgspec.Struct):
    """A question put to the engine for measuring it: what was retrieved, the evidence the
    answerability decision read, and (when asked for) the answer. Neither cached nor logged."""

    search: SearchResult  # the passages offered to the answerer
    features: list[float]  # kb_search/answerability.py FEATURES, for the caller's groups
    answerability: float  # the model's probability that the passages hold the answer
    refused_by_rule: bool  # "not found" whatever the model says (no passage, a missing code)
    answer: AskResult | None


class Questions:
    """Search and answers; answers are logged and kept in the answer cache."""

    def __init__(self, grounded: GroundedAnswers, reads: ReadRouter, flow: AnswerFlow,
                 query_log: QueryLog, conversation_turns: int = 3) -> None:
        self._grounded = grounded
        self._reads = reads
        self._flow = flow
        self._query_log = query_log
        self._cache = AnswerCache()
        self._turns = conversation_turns  # KB_CONVERSATION_TURNS

    def search(self, caller: Caller, question: str, k: int = 10,
               mode: Mode = "hybrid") -> SearchResult:
        """The top `k` passages the caller may see."""
        searcher = self._grounded.searcher
        prepared = searcher.prepare(question, mode)  # embedding holds no connection
        result, _ = self._reads.run_paired(lambda conn, beside: searcher.search(
            conn, prepared, list(caller.groups), k, mode, beside))
        return result

    def ask(self, caller: Caller, question: str, *, mode: AskMode = "auto",
            use_cache: bool = True, follows: str | None = None) -> AskResult:
        """An answer, logged; with `use_cache`, from the answer cache while the index has not
        changed since it was given. A question that `follows` an answer the caller received
        (its query_id) is read in that conversation's context; UnknownQueryError when the
        caller received no such answer. The cache keys on the question as searched (and the
        narrower one a follow-up's answer is written for), never on a follow-up's words, which
        mean what their conversation makes them mean: every conversation that reads them as
        「年次有給休暇・申請について、半日単位でも取れる？」 shares one answer. With an LLM answerer
        a follow-up is not cached: the model reads the conversation too."""
        history = self._conversation(caller, follows)
        versions: list[int] = []
        answerer = self._grounded.answerer
        read = None
        if history is not None and history.turns:
            read = self._flow.read_in_context(caller, question, history.turns, versions)
        cached = use_cache and (history is None or not isinstance(answerer, ChatAnswerer))
        asked = read.asked_as if read is not None else question
        key = AnswerCache.key(asked, caller.groups, answerer.name, mode,
                              read.question if read is not None else None)
        if cached and (hit := self._cache.get(key, self._reads.run(index_version))):
            result = msgspec.structs.replace(hit, query_id=str(uuid.uuid4()), asked_as=asked)
            self._query_log.record(caller, question, mode, result, None, cached=True,
                                   follows=follows)
            return result
        *_, result = self._flow.events(caller, question, mode, versions, streamed=False,
                                       history=history, read=read)
        assert isinstance(result, AskResult)
        if cached:
            # The oldest index version a part was read at: a change after it retires it.
            self._cache.put(key, min(versions), result)
        return result

    def ask_events(self, caller: Caller, question: str, *, mode: AskMode = "auto",
                   use_cache: Literal[False] = False,
                   follows: str | None = None) -> Iterator[AnswerEvent]:
        """The answer as it is worked out and written: its stages, the passages offered, the
        text's deltas (each with the citation numbers it uses first), then the answer,
        verified and logged once the iterator is exhausted. Always answered afresh
        (`use_cache` can only be False): a cached answer has no stages or deltas to show.
        Closing the iterator early stops the work (a part not yet searched is not). The
        conversation `follows` names is read before the first event (UnknownQueryError)."""
        del use_cache  # stated at the call, so no door assumes a cached stream
        history = self._conversation(caller, follows)
        return self._flow.events(caller, question, mode, [], streamed=True, history=history)

    def assess_follow_up(self, caller: Caller, earlier: list[str], question: str, *,
                         mode: AskMode = "auto") -> AskResult:
        """The answer to `question` asked after the `earlier` questions in one conversation,
        each answered in turn: for evaluation, so neither cached nor logged (the conversation
        is held here, as the log would hold it)."""
        logged: list[LoggedTurn] = []
        for asked in [*earlier, question]:
            history = (self._flow.conversation_of(caller, "", logged[-self._turns:])
                       if logged else None)
            *_, result = self._flow.events(caller, asked, mode, [], streamed=False, log=False,
                                           history=history)
            assert isinstance(result, AskResult)
            logged.append(LoggedTurn(asked, result.asked_as, result.answer,
                                     [c.chunk_id for c in result.citations
                                      if not c.learned_fact]))
        return result

    def _conversation(self, caller: Caller, follows: str | None) -> Conversation | None:
        return (self._flow.conversation(caller, follows, self._turns)
                if follows is not None else None)

    def assess(self, caller: Caller, question: str, *, mode: AskMode = "auto",
               answer: bool = True) -> Assessment:
        """What the engine retrieves and decides for `question`, with the answer when asked:
        for evaluation and fitting, so neither cached nor logged. Retrieval and the decision
        are the whole question's; the answer is given in `mode`."""
        _, prepared = self._flow.retrieve(caller, question)
        if not answer:
            given = None
        elif mode == "flash":
            given = self._grounded.answer(prepared, "assessment")
        else:
            *_, given = self._flow.events(caller, question, mode, [], streamed=False,
                                          log=False)
            assert isinstance(given, AskResult)
        return Assessment(
            search=prepared.search, features=prepared.features,
            answerability=prepared.answerability, refused_by_rule=prepared.refused_by_rule,
            answer=given)
