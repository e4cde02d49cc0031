"""A question answered from the passages the caller may see, with citations, or an honest
"not found" decided first from retrieval evidence (kb_search/answerability.py), before any
model is called."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec
import psycopg

from kb_core.keywords import normalize
from kb_search.answerability import AnswerabilityModels, default_models, question_evidence
from kb_search.answerers import (
    NOT_FOUND,
    Answer,
    Answerer,
    Passage,
    StreamedAnswer,
    answer_with_fallback,
    stream_with_fallback,
    verify,
)
from kb_search.planner import QueryPlan
from kb_search.search import PreparedQuery, Searcher, SearchResult

__all__ = [
    "AskResult",
    "Asker",
    "Citation",
    "KnownAnswer",
    "missing_evidence",
    "PreparedAnswer",
]

log = logging.getLogger(__name__)

PASSAGES = 5  # passages an answerer sees
QUOTE_CHARS = 200


class Citation(msgspec.Struct):
    n: int
    source_uri: str
    path: str
    title: str
    heading: str
    page: str | None
    chunk_id: int
    quote: str
    learned_fact: bool = False  # an approved correction: heading names reviewer and date


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


@dataclass
class PreparedAnswer:
    """Retrieval done, answer not yet generated: what streaming sends before the text."""

    search: SearchResult
    passages: list[Passage]
    evidence_found: bool
    reason: str | None  # why retrieval alone decided "not found"
    started: float
    answerability: float  # the model's probability that the passages hold the answer


class Asker:
    """Retrieval, the evidence gate, the answerer with its fallback, and verification."""

    def __init__(self, searcher: Searcher, answerer: Answerer,
                 max_false_not_found: float = 0.01,
                 models: AnswerabilityModels | None = None) -> None:
        self.searcher = searcher
        self.answerer = answerer
        self.models = models or default_models()
        # The share of answerable questions "not found" may cost (KB_MAX_FALSE_NOT_FOUND).
        self.max_false_not_found = max_false_not_found

    def retrieve(self, conn: psycopg.Connection, question: str, groups: list[str],
                 prepared: PreparedQuery | None = None,
                 beside: psycopg.Connection | None = None) -> PreparedAnswer:
        """The passages to answer from; `prepared` lets a caller embed the question before
        taking a database connection, `beside` runs a leg of the search (Searcher.search)."""
        prepared = prepared or self.searcher.prepare(question)
        started = time.perf_counter() - prepared.took_ms / 1000  # count the embedding too
        result, evidence = self.searcher.search(conn, prepared, groups, PASSAGES, beside=beside)
        passages = [
            Passage(n=h.rank, chunk_id=h.chunk_id, path=h.path, title=h.title,
                    heading=h.heading, page=h.page, content=h.content)
            for h in result.hits
        ]
        # The index's model as the search just read it, not the one configured.
        model = self.models.for_embedder(self.searcher.model)
        probability = model.probability(
            question_evidence(conn, prepared.plan, result, evidence, groups))
        threshold = model.threshold(self.max_false_not_found)
        reason = missing_evidence(prepared.plan, result)
        if reason is None and probability < threshold:
            reason = (f"weak evidence: the passages hold the answer with probability "
                      f"{probability:.3f}, under {threshold:.3f}")
        return PreparedAnswer(result, passages, reason is None, reason, started, probability)

    def answer(self, prepared: PreparedAnswer, question: str, query_id: str) -> AskResult:
        """The whole answer; no model is called when retrieval found nothing relevant."""
        if not prepared.evidence_found:
            return self.finish(prepared, _not_found(self.answerer), query_id)
        answer = answer_with_fallback(self.answerer, question, prepared.passages, log)
        return self.finish(prepared, answer, query_id)

    def stream(self, prepared: PreparedAnswer, question: str) -> StreamedAnswer | KnownAnswer:
        """Iterate for the text deltas, then `result()`; one delta of "not found" when
        retrieval found nothing relevant (no model is called)."""
        if not prepared.evidence_found:
            return KnownAnswer(_not_found(self.answerer))
        return stream_with_fallback(self.answerer, question, prepared.passages, log)

    def finish(self, prepared: PreparedAnswer, answer: Answer, query_id: str) -> AskResult:
        """Verify the answer and attach the passages it cites."""
        verified, warnings = verify(answer, prepared.passages)
        if prepared.reason:
            warnings = [*warnings, f"not found from retrieval evidence: {prepared.reason}"]
        by_n = {p.n: (p, h) for p, h in zip(prepared.passages, prepared.search.hits,
                                              strict=True)}
        cited = [by_n[n] for n in answer.cited if n in by_n] if answer.found else []
        return AskResult(
            query_id=query_id,
            answer=answer.text,
            found=answer.found,
            verified=verified,
            warnings=warnings,
            answerer=answer.answerer,
            citations=[
                Citation(n=p.n, source_uri=h.source_uri, path=p.path, title=p.title,
                         heading=p.heading, page=p.page, chunk_id=p.chunk_id,
                         quote=_quote(p.content), learned_fact=h.learned_fact)
                for p, h in cited
            ],
            took_ms=round((time.perf_counter() - prepared.started) * 1000, 1),
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


def _quote(content: str) -> str:
    return content if len(content) <= QUOTE_CHARS else content[:QUOTE_CHARS].rstrip() + "…"
