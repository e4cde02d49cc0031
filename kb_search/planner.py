"""From a question to what the two retrieval legs look for.

Japanese questions have no spaces, so the keyword leg works on 2-grams. Not all are worth the
same: those inside runs of kanji or katakana (有給, 給休, 休暇) carry the content, those that
touch hiragana (暇は, は何) mostly carry grammar and get a small weight. Codes (ZP-2041, QC-2031,
第22条) must match exactly, so they weigh most and also form an exact-match query of their own.
Runs of three or more content characters become phrase queries, so that 東京都庁 prefers
passages containing 東京都庁 over passages that merely contain 東京 and 都庁. A question with
a code leans on the keyword leg in the fusion: the embedding barely tells ZP-2041 from ZP-2014.
"""

from __future__ import annotations

import re

import msgspec

from kb_core.entities import CODE, Entity, entities_of, name_candidates
from kb_core.keywords import CJK_RUN, CONTENT_RUN, bigrams, normalize
from kb_search.synonyms import Synonyms

__all__ = ["QueryPlan", "QueryTerm", "plan_question"]

_ARTICLE = re.compile(r"第(\d+)([条章節項号])")
_LATIN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")

CODE_WEIGHT = 3.0
CONTENT_WEIGHT = 1.0
GRAMMAR_WEIGHT = 0.2
SYNONYM_FACTOR = 0.8
# The keyword leg's vote in the fusion for a question with a code (else 1, like the vector
# leg's). On samples/eval.jsonl the keyword leg's first hit was right for 33 of the 34 code
# questions and the vector leg's for 31, against 96 and 101 of the 107 others. Any weight from
# 1.05 to 2 ranked that set alike, 3 began to lose questions: a lean, not a takeover, so that
# where the legs agree RRF still decides. Without it an exact tie (rank 1 in one leg, 2 in the
# other, both passages holding the code) fell to the chunk id.
CODE_KEYWORD_WEIGHT = 1.25


class QueryTerm(msgspec.Struct, frozen=True):
    term: str
    weight: float
    prefix: bool = False  # a single character, matched as the start of 2-grams too
    phrase: int | None = None  # index into QueryPlan.phrases


class QueryPlan(msgspec.Struct, frozen=True):
    question: str
    embed_text: str  # what the vector leg embeds: the question and its synonyms
    terms: list[QueryTerm]
    phrases: list[str]  # tsquery texts of adjacent 2-grams
    codes: list[str]  # codes as written in normalized form
    code_query: str | None  # tsquery matching passages that contain every code
    keyword_weight: float  # the keyword leg's vote in the fusion, the vector leg's being 1
    expansions: list[str]
    entities: list[Entity]  # what the graph leg starts from (kb_core/entities.py)
    names: list[str]  # and the entities known by name alone it looks up (name_candidates)


def _quote(term: str) -> str:
    return "'" + term.replace("'", "''") + "'"


def _content_terms(text: str, weight: float, out: dict[str, QueryTerm],
                   phrases: list[str]) -> None:
    for run in CONTENT_RUN.findall(text):
        grams = bigrams(run)
        if not grams:
            continue
        phrase = None
        if len(grams) > 1:
            phrase = len(phrases)
            phrases.append(" <-> ".join(_quote(g) for g in grams))
        for gram in grams:
            _add(out, QueryTerm(gram, weight, phrase=phrase))


def _grammar_terms(text: str, out: dict[str, QueryTerm]) -> None:
    for run in CJK_RUN.findall(text):
        for gram in bigrams(run):
            if not CONTENT_RUN.fullmatch(gram):
                _add(out, QueryTerm(gram, GRAMMAR_WEIGHT))


def _add(out: dict[str, QueryTerm], term: QueryTerm) -> None:
    kept = out.get(term.term)
    if kept is None or kept.weight < term.weight:
        out[term.term] = term


def plan_question(question: str, synonyms: Synonyms | None = None) -> QueryPlan:
    """The terms, phrases and codes the keyword leg searches for, and the text to embed."""
    text = normalize(question)
    expansions = synonyms.expansions(text) if synonyms else []
    terms: dict[str, QueryTerm] = {}
    phrases: list[str] = []
    codes: list[str] = []
    code_queries: list[str] = []

    for code in dict.fromkeys(CODE.findall(text)):
        codes.append(code)
        code_queries.append(_quote(code))
        _add(terms, QueryTerm(code, CODE_WEIGHT))
    for number, unit in dict.fromkeys(_ARTICLE.findall(text)):
        codes.append(f"第{number}{unit}")
        code_queries.append(f"'第' <-> {_quote(number)} <-> {_quote(unit)}:*")
        _add(terms, QueryTerm(number, CODE_WEIGHT))
    for word in _LATIN.findall(text):
        for part in [word, *word.split("-")] if "-" in word else [word]:
            _add(terms, QueryTerm(part, CONTENT_WEIGHT))
    _content_terms(text, CONTENT_WEIGHT, terms, phrases)
    if not terms:
        # Only lone characters (寮は？): search them as prefixes of 2-grams. In a longer
        # question they would match far too many 2-grams to help.
        for char in dict.fromkeys(CONTENT_RUN.findall(text)):
            _add(terms, QueryTerm(char, CONTENT_WEIGHT, prefix=True))
    _grammar_terms(text, terms)
    for form in expansions:
        _content_terms(form, CONTENT_WEIGHT * SYNONYM_FACTOR, terms, phrases)
        for word in _LATIN.findall(form):
            _add(terms, QueryTerm(word, CONTENT_WEIGHT * SYNONYM_FACTOR))

    embed_text = question if not expansions else f"{question}（{'、'.join(expansions)}）"
    return QueryPlan(
        question=question,
        embed_text=embed_text,
        terms=list(terms.values()),
        phrases=phrases,
        codes=codes,
        code_query=" & ".join(f"({q})" for q in code_queries) or None,
        keyword_weight=CODE_KEYWORD_WEIGHT if codes else 1.0,
        expansions=expansions,
        entities=entities_of(question),
        names=name_candidates(question),
    )
