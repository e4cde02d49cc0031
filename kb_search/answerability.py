"""Whether the passages a search found hold the answer: one calibrated model of that probability,
from retrieval evidence alone, decided before any answerer is called.

The evidence of a question (`answerability_features`):

- similarity: the best cosine similarity of the question to a found passage (e5 crowds these
  into 0.8-0.9 for related and unrelated passages alike, so it cannot decide alone);
- coverage: the largest share of the question's informative term weight one passage holds;
- unknown: the share of the question's content weight in terms no passage the caller may see
  holds (the name of a person or product the company never wrote about); counted over the
  caller's passages only, so that a document outside its groups changes nothing it is told;
- agreement: whether both legs put the first passage near their top;
- phrases: the largest share of the question's words (its runs of kanji, of katakana, of Latin
  letters and digits, by length) one passage holds verbatim. Coverage counts 2-grams, so
  古代エジプト語 is half covered by a passage on エジプト and 古代ギリシャ; a question about a
  subject the index never describes keeps its 2-grams and loses its words;
- documents: how many documents the passages come from. Passages that answer mostly come from
  one or two; a question about something never written down gathers the nearest passages of
  three or more unrelated ones;
- names: whether a name of the question (a katakana word or a Latin or digit token of three
  characters or more: ラバウル, ZP-2041) is in none of the passages, though the index may hold
  it elsewhere (then `unknown` does not see it).

How far the best passage's similarity stands above the fifth's was a feature until the
phrases came: fitted beside them it took a negative weight and refused more answerable
questions of our own set. Whether the best passage holds the kind of thing asked for (a
number for 何日 or いつ) was tried and left out: on the development sets a quantity question
whose best passage held no number occurred six times in 3,699 questions, all answerable, too
rare to learn from.

A logistic model over them is fitted from the development sets by
`kb_eval/fit/answerability_model.py`, with cross-validation grouped by document, and committed as
`answerability.json`; the product never reads the development sets. Similarities mean something
different for every embedding model (e5 crowds them into 0.8-0.9, a hashing stand-in spreads
them), so the similarity features are used only by a model fitted on the index's own embedder;
an index built with another embedder is judged by a second model fitted without them. The
operator's knob is the share of answerable questions it may refuse (KB_MAX_FALSE_NOT_FOUND): a
model carries the quantiles of its probability over the answerable development questions, and
the threshold is the quantile at that share.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from functools import cache
from pathlib import Path

import msgspec
import psycopg

from kb_core.keywords import SCRIPT_RUN, normalize
from kb_core.queries import query
from kb_search.planner import GRAMMAR_WEIGHT, QueryPlan, QueryTerm
from kb_search.search import Evidence, SearchResult

__all__ = [
    "FEATURES",
    "AnswerabilityModel",
    "Hit",
    "answerability_features",
    "content_terms",
    "AnswerabilityModels",
    "default_models",
    "question_evidence",
]

MODEL_FILE = Path(__file__).with_name("answerability.json")
FEATURES = ("similarity", "coverage", "unknown", "agreement", "phrases", "documents",
            "names")
_TOP = 5  # passages the evidence is read from (what the answerer sees)
_NEAR_TOP = 3  # "near the top" of a leg, for agreement
# A name among the question's runs (SCRIPT_RUN): katakana, or Latin letters and digits, of three
# characters or more. Kanji words are left to coverage and phrases.
_NAME = re.compile(r"[ァ-ヺー]{3,}|[a-z0-9][a-z0-9.-]{2,}")


class Hit(msgspec.Struct, frozen=True):
    """What the features read of one found passage."""

    content: str
    document: str  # its document's source_uri
    vector_rank: int | None
    keyword_rank: int | None
    similarity: float | None
    coverage: float | None


def _content(plan: QueryPlan) -> list[QueryTerm]:
    return [t for t in plan.terms if t.weight > GRAMMAR_WEIGHT and not t.prefix]


def content_terms(plan: QueryPlan) -> list[str]:
    """The terms whose presence in the index `unknown` asks about."""
    return [t.term for t in _content(plan)]


def answerability_features(plan: QueryPlan, hits: Sequence[Hit],
                           unknown_terms: Collection[str]) -> list[float]:
    """The evidence of `FEATURES`, in order, for the question `plan` and its found passages
    (best first); `unknown_terms` are the `content_terms` no passage of the caller holds."""
    top = hits[:_TOP]
    best = max((h.similarity for h in top if h.similarity is not None), default=0.0)
    content = _content(plan)
    weight = sum(t.weight for t in content)
    unknown = sum(t.weight for t in content if t.term in unknown_terms)
    first = top[0] if top else None
    agreement = first is not None and all(
        r is not None and r <= _NEAR_TOP for r in (first.vector_rank, first.keyword_rank))
    words = set(SCRIPT_RUN.findall(normalize(plan.question)))
    texts = [normalize(h.content) for h in top]
    return [
        best,
        max((h.coverage or 0.0 for h in top), default=0.0),
        unknown / weight if weight else 0.0,
        float(agreement),
        _phrases(words, texts),
        float(len({h.document for h in top})),
        float(_missing_name(words, texts)),
    ]


def _phrases(words: set[str], texts: list[str]) -> float:
    if not texts:
        return 0.0
    words = {w for w in words if len(w) > 1}
    length = sum(map(len, words))
    if not length:
        return 1.0  # a question without a word of two characters loses none
    return max(sum(len(w) for w in words if w in text) for text in texts) / length


def _missing_name(words: set[str], texts: list[str]) -> bool:
    return bool(texts) and any(_NAME.fullmatch(w) and not any(w in text for text in texts)
                               for w in words)


def question_evidence(conn: psycopg.Connection, plan: QueryPlan, result: SearchResult,
                      evidence: Sequence[Evidence], groups: list[str]) -> list[float]:
    """`answerability_features` of a search's result, for a caller with `groups`."""
    unknown = {t for (t,) in conn.execute(query("unknown_terms"),
                                          {"terms": content_terms(plan), "groups": groups})}
    hits = [Hit(h.content, h.source_uri, h.ranks.vector, h.ranks.keyword, e.similarity,
                e.coverage)
            for h, e in zip(result.hits, evidence, strict=True)]
    return answerability_features(plan, hits, unknown)


class AnswerabilityModel(msgspec.Struct, frozen=True):
    """A logistic model of "the answer is in the passages", over standardized features."""

    embedder: str | None  # the index's embedding model it was fitted on; None: any model
    features: list[str]  # of FEATURES, by name
    mean: list[float]
    scale: list[float]
    weights: list[float]
    bias: float
    # (share of answerable development questions refused, probability threshold), ascending
    refusal_quantiles: list[tuple[float, float]]
    fitted_on: str  # what it was fitted from, and its held-out figures

    def probability(self, features: Sequence[float]) -> float:
        """The probability for the full `FEATURES` vector of a question."""
        used = [features[FEATURES.index(name)] for name in self.features]
        z = self.bias + sum(w * (x - m) / s for w, x, m, s in
                            zip(self.weights, used, self.mean, self.scale, strict=True))
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))

    def threshold(self, max_false_not_found: float) -> float:
        """The probability under which a question is refused, so that at most this share of
        answerable development questions was."""
        chosen = 0.0
        for share, threshold in self.refusal_quantiles:
            if share > max_false_not_found:
                break
            chosen = threshold
        return chosen


class AnswerabilityModels(msgspec.Struct, frozen=True):
    """The committed models: one per embedder they were fitted on, and one for any embedder."""

    models: list[AnswerabilityModel]

    def for_embedder(self, embedder: str | None) -> AnswerabilityModel:
        """The model fitted on `embedder` (an index's recorded model), else the one without
        similarity features."""
        by_embedder = {m.embedder: m for m in self.models}
        return by_embedder.get(embedder) or by_embedder[None]


@cache
def default_models() -> AnswerabilityModels:
    """The committed models (kb_eval/fit/answerability_model.py writes them)."""
    models = msgspec.json.decode(MODEL_FILE.read_bytes(), type=AnswerabilityModels)
    for model in models.models:
        if not set(model.features) <= set(FEATURES):
            raise ValueError(f"{MODEL_FILE} uses features {model.features}, not all of "
                             f"{list(FEATURES)}: refit it with "
                             "`python -m kb_eval.fit answerability`")
    if None not in {m.embedder for m in models.models}:
        raise ValueError(f"{MODEL_FILE} has no model for any embedder")
    return models
