"""The ask pipeline: a question split into its parts (or kept whole), each part retrieved under
the caller's groups, then answered whole or part by part (kb_search/part_answers.py), its entities
linked and its log entry written. `AnswerFlow.events` yields the work as it goes: the stages,
the passages offered, the answer's text piece by piece, then the answer itself.

Retrieval runs where the read router sends it (a replica that has reached the fence, or the
primary), the index version read in the same transaction as the passages."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal

import msgspec
import psycopg

from kb_core.callers import Caller
from kb_core.entities import Entity, entities_of
from kb_core.queries import query
from kb_core.read_routing import ReadRouter
from kb_core.settings import DeepSettings
from kb_search.answerers.answer import Exchange
from kb_search.answerers.chat_answerer import ChatAnswerer
from kb_search.answerers.numbering import AnswerDelta, NumberedStream, renumber
from kb_search.answerers.prompt import REWRITE_PROMPT, rewrite_message
from kb_search.entity_cards import entities_in
from kb_search.follow_ups import (
    EarlierTurn,
    Reading,
    checked_rewrite,
    continues,
    exchanges,
    in_context,
    in_place,
    speaks_of,
)
from kb_search.grounded_answers import AskResult, GroundedAnswers, PreparedAnswer
from kb_search.part_answers import (
    answer_parts,
    combine,
    confirmed,
    part_citations,
    passages_per_part,
)
from kb_search.passage_reference import PassageRef, reference
from kb_search.query_log import LoggedTurn, QueryLog
from kb_search.question_parts import QuestionPart, QuestionSplit, refers_back, split_question
from kb_search.search import SearchResult, passage_hits

__all__ = [
    "ASK_MODES",
    "AnswerEvent",
    "AnswerFlow",
    "AskMode",
    "Conversation",
    "OfferedPassage",
    "OfferedPassages",
    "Stage",
    "StagePart",
    "index_version",
]

# How a question is answered: `flash` whole, as one passage may answer it; `deep` part by
# part when it asks several things (kb_search/question_parts.py); `auto` part by part too,
# unless one passage turns out to answer every part.
AskMode = Literal["auto", "flash", "deep"]
ASK_MODES: tuple[AskMode, ...] = ("auto", "flash", "deep")

logger = logging.getLogger(__name__)
# Threads that search a follow-up alone while its reading in context is searched.
_ALONE = ThreadPoolExecutor(max_workers=16, thread_name_prefix="follow-up-alone")


class OfferedPassage(PassageRef):
    """A passage the answerer is given, before it answers: what a citation may come to be."""

    passage: int  # the number a delta's `cited` and the answer's citations refer to it by


class OfferedPassages(msgspec.Struct):
    """The first event of an answer as it is written: the passages offered, under their own
    numbers. Not the answer's [n]: those come with the deltas that first use them."""

    passages: list[OfferedPassage]


class StagePart(msgspec.Struct):
    """A part of the plan: the sub-question, and what the answer calls it."""

    question: str
    label: str


class Stage(msgspec.Struct, omit_defaults=True):
    """Where an answer's work stands before its text: `plan` (its parts; none for a question
    answered whole), `part` (a part's retrieval: whether evidence was found, how many
    passages), `answer` (writing it)."""

    stage: Literal["plan", "part", "answer"]
    parts: list[StagePart] | None = None
    index: int | None = None
    found: bool | None = None
    hits: int | None = None


@dataclasses.dataclass(frozen=True)
class Conversation:
    """The answer a question follows, and the earlier turns it ends (the oldest first)."""

    follows: str
    turns: list[EarlierTurn]


# The stages of the work, the passages offered, then the answer's text piece by piece, then
# the answer itself (verified, logged), which is authoritative.
AnswerEvent = Stage | OfferedPassages | AnswerDelta | AskResult


class AnswerFlow:
    """One answer's work, from the question to the logged answer."""

    def __init__(self, grounded: GroundedAnswers, reads: ReadRouter, query_log: QueryLog,
                 deep: DeepSettings) -> None:
        self._grounded = grounded
        self._reads = reads
        self._query_log = query_log
        self._deep = deep

    def events(self, caller: Caller, question: str, mode: AskMode, versions: list[int], *,
               streamed: bool, log: bool = True, history: Conversation | None = None,
               read: PreparedAnswer | None = None) -> Iterator[AnswerEvent]:
        """The events of one answer, the index version of each read appended to `versions`;
        unless `streamed`, an LLM writes the answer whole (no deltas); with `log`, the answer
        is written to the query log before it is yielded. A question that follows earlier
        turns (`history`) is read in their context first (`read`, when read already), and
        answered as it is read; an LLM answerer is shown the earlier turns."""
        query_id = str(uuid.uuid4())
        if read is None and history is not None and history.turns:
            read = self.read_in_context(caller, question, history.turns, versions)
        earlier = exchanges(history.turns) if history is not None else []
        asked = read.asked_as if read is not None else question
        split = self._split(asked, mode)
        warnings = ([f"the question asks {split.over_limit} things, more than "
                     f"KB_DEEP_MAX_PARTS={self._deep.max_parts}: answered as one question"]
                    if split.over_limit else [])
        whole = False  # a question of several items that one table answers whole
        if split.multi and split.kind == "items" and mode == "auto":
            # Items of one table (「ZX-3100とZX-3150ではどちらが〜」) are answered from its
            # cells, whole; otherwise the parts are searched as always. Items compared in
            # words the table cannot compute (「納入後12か月」 against 「18か月」) are left to
            # the parts' comparison.
            if read is None:
                version, read = self.retrieve(caller, asked)
                versions.append(version)
            table = read.table
            whole = table is not None and not (split.compares and table.question is not None
                                               and table.question.kind != "comparison")
        if split.multi and not whole:
            # A tentative split is searched before it is shown: its outcome decides it.
            if split.tentative:
                stages, retrieved = _collected(self._search_parts(caller, split, versions))
            else:
                yield _plan(split)
                stages, retrieved = [], (yield from self._search_parts(caller, split, versions))
            if not split.tentative or mode == "deep" or confirmed(retrieved):
                if stages:
                    yield _plan(split)
                    yield from stages
                yield Stage("answer")
                result = yield from self._parts_answer(asked, split, retrieved, query_id,
                                                       streamed, earlier)
                yield self._finished(caller, question, mode, result, _parts_hits(retrieved),
                                     log, history)
                return
        yield Stage("plan", parts=[])
        if read is None:
            version, read = self.retrieve(caller, asked)
            versions.append(version)
        prepared = read
        prepared.earlier = earlier
        if split.multi and not whole:  # the parts searched first count in the answer's time
            prepared.started = min([prepared.started,
                                    *(p.started for p in retrieved if p is not None)])
        yield Stage("answer")
        if streamed:
            yield _offered(prepared)
            stream = self._grounded.stream(prepared)
            yield from stream
            result = self._grounded.finish(prepared, stream.result(), query_id)
        else:
            result = self._grounded.answer(prepared, query_id)
        result.warnings.extend(warnings)
        yield self._finished(caller, question, mode, result, prepared.search, log, history)

    def retrieve(self, caller: Caller, question: str,
                 carried: list[Entity] | None = None) -> tuple[int, PreparedAnswer]:
        """The index version and the passages, read in one transaction on one server; the
        graph leg starts from the entities `carried` too. The version is read first, so the
        passages are never older than the version that tags their answer in the cache (a
        newer version would serve them after a revocation)."""
        question_vector = self._grounded.searcher.prepare(question)  # holds no connection
        if carried:
            named = {e.key for e in question_vector.plan.entities}
            extra = {e.key: e for e in carried if e.key not in named}
            plan = msgspec.structs.replace(question_vector.plan, entities=[
                *question_vector.plan.entities, *extra.values()])
            question_vector = dataclasses.replace(question_vector, plan=plan)

        def read(conn: psycopg.Connection,
                 beside: psycopg.Connection | None) -> tuple[int, PreparedAnswer]:
            with conn.transaction():
                return index_version(conn), self._grounded.retrieve(
                    conn, question, list(caller.groups), question_vector, beside)

        return self._reads.run_paired(read)

    def read_in_context(self, caller: Caller, question: str, turns: list[EarlierTurn],
                        versions: list[int]) -> PreparedAnswer:
        """A follow-up's passages, read in the conversation's context or alone, whichever the
        evidence favours (its `question` is what was searched). An ellipsis naming something
        of the kind of the earlier question's topic (「じゃあ課長は？」) is read as that
        question with it in the topic's place, kept when it finds evidence. Otherwise the
        reading in context (an LLM answerer's rewrite, else the topic put before the question)
        is kept when it finds stronger evidence than the question alone, or as strong for a
        question that points back (それ, じゃあ, 「部長なら？」), or when neither finds any for
        such a question. A change of topic finds its evidence alone and keeps it.

        The question alone is searched in another thread meanwhile (it waits mostly on the
        embedder and the database): a follow-up costs about one search more than a question,
        not two."""
        searched_alone = _ALONE.submit(self.retrieve, caller, question)
        try:
            return self._read(caller, question, turns, versions, searched_alone)
        finally:
            searched_alone.cancel()  # unused after a reading in place: not run if not begun

    def _read(self, caller: Caller, question: str, turns: list[EarlierTurn],
              versions: list[int], searched_alone: Future[tuple[int, PreparedAnswer]]
              ) -> PreparedAnswer:
        rewrite = self._rewrite(question, turns)
        if rewrite is None and (placed := in_place(question, turns)) is not None:
            # The earlier question itself, asking of something else of its kind: kept
            # whenever it finds evidence (the question alone, an ellipsis, asks nothing).
            version, read = self.retrieve(caller, placed)
            versions.append(version)
            if read.evidence_found:
                return read
        reading = (Reading(rewrite, rewrite) if rewrite is not None
                   else in_context(question, turns))
        read = None
        if reading is not None:
            version, read = self.retrieve(caller, reading.searched)
            versions.append(version)
            if reading.focused != reading.searched:
                read.question, read.searched = reading.focused, reading.searched
        version, alone = searched_alone.result()
        versions.append(version)
        if read is None:
            return alone
        if not read.evidence_found:
            # Found by neither: a question that points back asked what its reading says
            # (the knowledge-gap report lists it so).
            return read if not alone.evidence_found and continues(question) else alone
        if not alone.evidence_found:
            # Unless the question asks something of its own that the reading's passages do
            # not write: then the reading found the earlier topic, not what was asked.
            return (read if continues(question) or speaks_of(question, read.search.hits)
                    else alone)
        if read.answerability > alone.answerability:
            return read
        # As strong: the reading a question that points back asks for.
        return read if (continues(question)
                        and read.answerability == alone.answerability) else alone

    def _rewrite(self, question: str, turns: list[EarlierTurn]) -> str | None:
        """An LLM answerer's rewrite of the question from the conversation, once checked;
        None without one, or when it fails (the offline reading is read instead)."""
        model = self._grounded.answerer
        if not isinstance(model, ChatAnswerer):
            return None
        try:
            reply = model.complete(REWRITE_PROMPT, rewrite_message(question, exchanges(turns)))
        # Deliberately broad, as the answerers' fallback: a provider fails in ways no list
        # anticipates, and the question is still read offline.
        except Exception as exc:  # noqa: BLE001
            logger.warning("%s failed to rewrite a follow-up (%s: %s); read offline",
                           model.name, type(exc).__name__, exc)
            return None
        return checked_rewrite(reply, question, turns)

    def _split(self, question: str, mode: AskMode) -> QuestionSplit:
        if mode == "flash":
            return QuestionSplit([QuestionPart(question, question)], "single")
        return split_question(question, self._deep.max_parts)

    def _search_parts(self, caller: Caller, split: QuestionSplit,
                      versions: list[int]
                      ) -> Generator[Stage, None, list[PreparedAnswer | None]]:
        """Each part's retrieval, a stage as each ends, until the time budget is spent;
        returns them by part (None for a part not reached in time)."""
        started = time.perf_counter()
        retrieved: list[PreparedAnswer | None] = []
        asked: list[Entity] = []  # what the parts before named
        for index, part in enumerate(split.parts):
            if time.perf_counter() - started > self._deep.timeout_s:
                retrieved.append(None)  # named in the answer as not reached in time
                continue
            # A part that opens on an earlier part's subject (その工場の〜) starts the graph
            # leg from what the earlier parts named: its answer is one reference away.
            carried = asked if refers_back(part.question) else []
            asked = [*asked, *entities_of(part.question)]
            version, prepared = self.retrieve(caller, part.question, carried)
            versions.append(version)
            retrieved.append(prepared)
            yield Stage("part", index=index, found=prepared.evidence_found,
                        hits=len(prepared.search.hits))
        return retrieved

    def _parts_answer(self, question: str, split: QuestionSplit,
                      retrieved: list[PreparedAnswer | None], query_id: str,
                      streamed: bool, earlier: list[Exchange]
                      ) -> Generator[AnswerEvent, None, AskResult]:
        """The deltas of an answer given part by part; returns the answer."""
        started = min((p.started for p in retrieved if p is not None), default=time.perf_counter())
        answerer = self._grounded.answerer
        parts = combine(question, split, retrieved, started, passages_per_part(answerer))
        parts.prepared.earlier = earlier
        yield _offered(parts.prepared)
        stream = answer_parts(answerer, parts, streamed=streamed)
        yield from NumberedStream(stream, parts.prepared.offered)
        answer = stream.result()
        result = self._grounded.finish(parts.prepared, answer, query_id)
        _, numbers = renumber(answer.text, parts.prepared.offered)
        return msgspec.structs.replace(result, parts=part_citations(parts, stream, numbers),
                                       comparison=stream.comparison)

    def _finished(self, caller: Caller, question: str, mode: AskMode, result: AskResult,
                  hits: SearchResult, log: bool, history: Conversation | None) -> AskResult:
        """The answer with the entities it names linked; logged with the passages retrieved
        for it (`hits`) and the answer it follows unless not `log`."""
        if result.found:
            result.entities = self._reads.run(
                lambda conn: entities_in(conn, result.answer, list(caller.groups)))
        if log:
            self._query_log.record(caller, question, mode, result, hits, cached=False,
                                   follows=history.follows if history is not None else None)
        return result

    def conversation(self, caller: Caller, follows: str, turns: int) -> Conversation:
        """The earlier turns of the conversation the answer `follows` ends (UnknownQueryError
        when the caller received no such answer)."""
        logged = self._query_log.conversation(caller, follows, turns)
        return self.conversation_of(caller, follows, list(reversed(logged)))

    def conversation_of(self, caller: Caller, follows: str,
                        logged: list[LoggedTurn]) -> Conversation:
        """Turns as a conversation, the oldest first, each with the passages it cited that the
        caller may read now (a passage of a group the caller has lost is dropped here), and
        its answer only when the caller may still read every passage it cited."""
        cited = [c for turn in logged for c in turn.cited_chunks]
        readable = {h.chunk_id: h for h in self._reads.run(
            lambda conn: passage_hits(conn, cited, list(caller.groups), 1))} if cited else {}
        return Conversation(follows, [
            EarlierTurn(turn.question, turn.asked_as,
                        [readable[c] for c in turn.cited_chunks if c in readable],
                        turn.answer if all(c in readable for c in turn.cited_chunks) else None)
            for turn in logged])


def index_version(conn: psycopg.Connection) -> int:
    """The index's version: bumped by every change of what a search may return."""
    return conn.execute(query("index_version")).fetchone()[0]


def _offered(prepared: PreparedAnswer) -> OfferedPassages:
    return OfferedPassages(passages=[
        OfferedPassage(passage=p.n, **reference(p)) for p in prepared.passages])


def _collected(events: Generator[Stage, None, list[PreparedAnswer | None]]
               ) -> tuple[list[Stage], list[PreparedAnswer | None]]:
    """What a generator yields, and what it returns."""
    yielded = []
    while True:
        try:
            yielded.append(next(events))
        except StopIteration as stop:
            return yielded, stop.value


def _plan(split: QuestionSplit) -> Stage:
    return Stage("plan", parts=[StagePart(p.question, p.label) for p in split.parts])


def _parts_hits(retrieved: list[PreparedAnswer | None]) -> SearchResult:
    """Every part's passages, for the query log."""
    hits = [h for p in retrieved if p is not None for h in p.search.hits]
    return SearchResult(query="", took_ms=0.0, hits=hits)
