"""A question answered from the passages the caller may see, with citations, or an honest
"not found" decided first from retrieval evidence (kb_search/answerability.py), before any
model is called.

The answerer cites passages by their retrieval rank; the answer, its stream and its citations
number them in the order the answer first cites them (kb_search/answerers/numbering.py), and
each citation quotes the sentences of its passage the answer used (kb_search/quoting.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec
import psycopg

from kb_core.keywords import normalize
from kb_search.answerability import AnswerabilityModels, default_models, question_evidence
from kb_search.answerers import (
    NOT_FOUND,
    Answer,
    Answerer,
    Passage,
    answer_with_fallback,
    stream_with_fallback,
    verify,
)
from kb_search.answerers.answer import Claim, Exchange, citations, claims
from kb_search.answerers.numbering import CitationNumber, NumberedStream, renumber
from kb_search.comparison import Comparison
from kb_search.entity_cards import EntityLink
from kb_search.passage_reference import PassageRef, reference
from kb_search.planner import QueryPlan
from kb_search.quoting import quote_passage
from kb_search.search import PreparedQuery, Searcher, SearchHit, SearchResult, passage_hits
from kb_search.tables.cell_answers import CitedCell, TableAnswer
from kb_search.tables.grounding import (
    cells_in,
    check_table_answers,
    read_tables,
    table_text,
    tool_tables,
    unread_passages,
    used_results,
)
from kb_search.tables.tools import TableTools

__all__ = [
    "AnswerPart",
    "AskResult",
    "GroundedAnswers",
    "Citation",
    "KnownAnswer",
    "missing_evidence",
    "PreparedAnswer",
]

log = logging.getLogger(__name__)

PASSAGES = 5  # passages an answerer sees
# Who answers from a table's cells: the same sentences whichever answerer is configured.
TABLE_ANSWERER = "table"


class Citation(PassageRef):
    """A passage the answer cites, numbered as the answer first cites it, with what it used."""

    n: int  # [n] in the answer: 1, 2, ... in the order of first citation
    passage: int  # the passage's number as offered (its retrieval rank; the stream's `passage`)
    source_uri: str  # the server's file; `named_by_path` replaces it where an answer leaves
    quote: str  # the passage's sentences the answer used, "…" between those apart
    context_before: str  # the passage's sentence before the quote ("" at its start)
    context_after: str  # the passage's sentence after it ("" at its end)
    # The table cells the answer states or computes from that this passage holds (a table
    # answer, kb_search/tables/): what the page and the source view highlight.
    cells: list[CitedCell] = []


class AnswerPart(msgspec.Struct):
    """A part of a multi-part answer (Deep mode): its sub-question, whether evidence was found
    for it, and the answer's [n] that answer it."""

    question: str
    label: str  # what the answer calls it
    found: bool
    citations: list[int]
    searched: bool = True  # False: the time budget ran out before its search


class AskResult(msgspec.Struct):
    """The `kb ask` JSON and the body of `POST /v1/ask` (docs/http-api.md)."""

    query_id: str
    answer: str
    found: bool
    verified: bool
    warnings: list[str]
    answerer: str
    citations: list[Citation]
    took_ms: float
    parts: list[AnswerPart] = []  # a question answered part by part; empty when answered whole
    comparison: Comparison | None = None  # what the answer states of its parts' values
    # The codes, 規程 and departments the answer names that the caller's passages name too:
    # each links to its card (GET /v1/entities/{id}).
    entities: list[EntityLink] = []
    # The question as searched: a follow-up read with the conversation's topic
    # (kb_search/follow_ups.py), else the question as asked.
    asked_as: str = ""


@dataclass
class PreparedAnswer:
    """Retrieval done, answer not yet generated: what streaming sends before the text."""

    search: SearchResult
    passages: list[Passage]
    evidence_found: bool
    reason: str | None  # why retrieval alone decided "not found"
    started: float
    answerability: float  # the model's probability that the passages hold the answer
    question: str  # what the passages were retrieved for: what is answered and quoted for
    # The evidence the decision read (answerability FEATURES) and whether a rule decided
    # "not found" whatever the model says: what evaluation and fitting measure.
    features: list[float] = field(default_factory=list)
    refused_by_rule: bool = False
    # What the tables of the passages' documents answer, or say is missing (a near miss).
    table: TableAnswer | None = None
    # The tables an LLM answerer may compute from, through its tools.
    tools: TableTools | None = None
    # How many of the passages the answerer reads; those after them hold table rows, offered
    # for citation only.
    shown: int | None = None
    # The conversation the question continues, as the answerer may be shown it.
    earlier: list[Exchange] = field(default_factory=list)
    # What the passages were searched for when the answer is written for a narrower question
    # (a follow-up read with the conversation's topic: kb_search/follow_ups.py, `Reading`).
    searched: str | None = None

    @property
    def asked_as(self) -> str:
        """The question as searched."""
        return self.searched or self.question

    @property
    def offered(self) -> list[int]:
        """The numbers the passages are offered under."""
        return [p.n for p in self.passages]

    @property
    def shown_passages(self) -> list[Passage]:
        """The passages the answerer reads."""
        return self.passages[:self.shown]


class GroundedAnswers:
    """Retrieval, the evidence gate, the answerer with its fallback, and verification."""

    def __init__(self, searcher: Searcher, answerer: Answerer | None,
                 max_false_not_found: float = 0.01,
                 models: AnswerabilityModels | None = None) -> None:
        self.searcher = searcher
        self._answerer = answerer
        self.models = models or default_models()
        # The share of answerable questions "not found" may cost (KB_MAX_FALSE_NOT_FOUND).
        self.max_false_not_found = max_false_not_found

    @property
    def answerer(self) -> Answerer:
        """The configured answerer; none when only retrieval was asked for (a door that only
        searches needs no answerer's API key)."""
        if self._answerer is None:
            raise RuntimeError("opened for retrieval only (answers=False): nothing answers")
        return self._answerer

    def retrieve(self, conn: psycopg.Connection, question: str, groups: list[str],
                 prepared: PreparedQuery | None = None,
                 beside: psycopg.Connection | None = None) -> PreparedAnswer:
        """The passages to answer from; `prepared` lets a caller embed the question before
        taking a database connection, `beside` runs a leg of the search (Searcher.search)."""
        prepared = prepared or self.searcher.prepare(question)
        started = time.perf_counter() - prepared.took_ms / 1000  # count the embedding too
        result, evidence = self.searcher.search(conn, prepared, groups, PASSAGES, beside=beside)
        # The index's model as the search just read it, not the one configured.
        model = self.models.for_embedder(self.searcher.model)
        features = question_evidence(conn, prepared.plan, result, evidence, groups)
        probability = model.probability(features)
        threshold = model.threshold(self.max_false_not_found)
        reading = read_tables(conn, question, result.hits, groups,
                              self.searcher.synonyms.expansions(normalize(question)))
        table = reading.answer
        reason = rule = missing_evidence(prepared.plan, result)
        if rule is None and table is not None and table.missing:
            reason = rule = f"no table answers it: {table.missing}"
        elif reason is None and table is None and probability < threshold:
            reason = (f"weak evidence: the passages hold the answer with probability "
                      f"{probability:.3f}, under {threshold:.3f}")
        shown = len(result.hits)
        tables = (tool_tables(reading, result.hits)
                  if reason is None and self._answerer is not None
                  and self._answerer.calls_tools else [])
        if reason is None:
            # The rows a table answer rests on, and those the tools may compute from, where
            # the search did not offer them: offered for citation, not shown to the answerer.
            rows = [r for s in table.sentences for r in s.rows] if table is not None else []
            rows += [r for t in tables for r in t.rows]
            if unread := unread_passages(rows, {h.chunk_id for h in result.hits}):
                result.hits.extend(passage_hits(conn, unread, groups, len(result.hits) + 1))
        passages = [
            Passage(n=h.rank, content=h.content, **reference(h)) for h in result.hits
        ]
        tools = TableTools(tables, {h.chunk_id: h.rank for h in result.hits})
        return PreparedAnswer(result, passages, reason is None, reason, started, probability,
                              question, features, rule is not None,
                              table if reason is None else None,
                              tools if tools.tables else None, shown)

    def answer(self, prepared: PreparedAnswer, query_id: str) -> AskResult:
        """The whole answer; no model is called when retrieval found nothing relevant."""
        if not prepared.evidence_found:
            return self.finish(prepared, _not_found(self.answerer), query_id)
        if prepared.table is not None and prepared.tools is None:
            return self.finish(prepared, _table_answer(prepared, prepared.table), query_id)
        answer = answer_with_fallback(self.answerer, prepared.question, prepared.shown_passages,
                                      log, prepared.tools, _ready_answer(prepared),
                                      prepared.earlier)
        return self.finish(prepared, answer, query_id)

    def stream(self, prepared: PreparedAnswer) -> NumberedStream:
        """Iterate for the text deltas, their citations numbered as the answer first uses
        them, then `result()`; one delta of "not found" when retrieval found nothing relevant
        (no model is called)."""
        if not prepared.evidence_found:
            return NumberedStream(KnownAnswer(_not_found(self.answerer)), prepared.offered)
        if prepared.table is not None and prepared.tools is None:
            return NumberedStream(KnownAnswer(_table_answer(prepared, prepared.table)),
                                  prepared.offered)
        return NumberedStream(
            stream_with_fallback(self.answerer, prepared.question, prepared.shown_passages,
                                 log, prepared.tools, _ready_answer(prepared),
                                 prepared.earlier),
            prepared.offered)

    def finish(self, prepared: PreparedAnswer, answer: Answer, query_id: str) -> AskResult:
        """Number the answer's citations as it first uses them, verify it, and attach what it
        quotes of each passage it cites."""
        text, numbers = renumber(answer.text, prepared.offered)
        shown = msgspec.structs.replace(answer, text=text, cited=citations(text))
        by_n = {p.n: (p, h) for p, h in zip(prepared.passages, prepared.search.hits,
                                              strict=True)}
        # The passages under the reader's numbers: verification names what a reader sees.
        cited = [(c, *by_n[c.passage]) for c in numbers]
        verified, warnings = verify(shown, [msgspec.structs.replace(p, n=c.n)
                                            for c, p, _ in cited])
        tables = _table_answers(prepared, shown, {p.chunk_id for _, p, _ in cited})
        if tables and shown.found:
            warnings = check_table_answers(tables, {p.chunk_id: p.content for _, p, _ in cited},
                                           warnings)
            verified = not warnings
        if prepared.reason:
            warnings = [*warnings, f"not found from retrieval evidence: {prepared.reason}"]
        said = claims(shown.text)
        return AskResult(
            query_id=query_id,
            answer=shown.text,
            found=shown.found,
            verified=verified,
            warnings=warnings,
            answerer=shown.answerer,
            citations=[_citation(c, p, h, said, prepared.question, tables)
                       for c, p, h in cited] if shown.found else [],
            took_ms=round((time.perf_counter() - prepared.started) * 1000, 1),
            asked_as=prepared.asked_as,
        )


def missing_evidence(plan: QueryPlan, result: SearchResult) -> str | None:
    """Why the passages cannot hold the answer whatever the model says: there are none, or a
    code the question names (ZP-2050, 第45条) is in none of them."""
    if not result.hits:
        return "no passage the caller may see matches the question"
    texts = [normalize(f"{h.title} {h.heading} {h.content}") for h in result.hits]
    for code in plan.codes:
        if not any(code in text for text in texts):
            return f"no passage mentions {code}"
    return None


class KnownAnswer:
    """An answer decided before generation, streamed as a single delta."""

    def __init__(self, answer: Answer) -> None:
        self._answer = answer

    def __iter__(self) -> Iterator[str]:
        return iter([self._answer.text])

    def result(self) -> Answer:
        return self._answer


def _not_found(answerer: Answerer) -> Answer:
    # Labelled with the configured answerer: it was chosen, just not needed.
    return Answer(text=NOT_FOUND, found=False, cited=[], answerer=answerer.name)


def _citation(number: CitationNumber, passage: Passage, hit: SearchHit, said: list[Claim],
              question: str, tables: list[TableAnswer]) -> Citation:
    """The citation [number.n] of an answer whose citing pieces are `said`, quoting what the
    answer used of `passage` (and the cells of it the answer's tables rest on)."""
    quote = quote_passage(passage, [c.text for c in said if number.n in c.cites], question)
    return Citation(n=number.n, passage=number.passage, source_uri=hit.source_uri,
                    quote=quote.text, context_before=quote.before, context_after=quote.after,
                    cells=cells_in(tables, passage.chunk_id), **reference(passage))


def _table_answer(prepared: PreparedAnswer, table: TableAnswer) -> Answer:
    """A table's answer in the answer's form, citing the passages that hold its rows."""
    text = table_text(table, {p.chunk_id: p.n for p in prepared.passages})
    return Answer(text=text, found=True, cited=citations(text), answerer=TABLE_ANSWERER)


def _ready_answer(prepared: PreparedAnswer) -> Answer | None:
    """What answers if the LLM fails: the table's answer where a table answers."""
    return _table_answer(prepared, prepared.table) if prepared.table is not None else None


def _table_answers(prepared: PreparedAnswer, answer: Answer,
                   cited: set[int]) -> list[TableAnswer]:
    """What the answer states from tables: the table's answer where it is the answer (also as
    an LLM's fallback), else the results of the LLM's tool calls that it cites the rows of."""
    if answer.answerer.startswith(TABLE_ANSWERER):
        return [prepared.table] if prepared.table is not None else []
    return used_results(prepared.tools.results, cited) if prepared.tools is not None else []
