"""Figures of the table questions of a set (its lines with "table": cell, extreme, count,
comparison): per kind, the share of answers that hold the value and that state it precisely,
and the share of its near misses answered "not found"."""

from __future__ import annotations

import unicodedata

import msgspec

from kb_eval.question_sets import EvalQuestion, holds_answer
from kb_eval.rounded import rate
from kb_search import AskResult
from kb_search.answerers.answer import CITATION

__all__ = ["PRECISE_LEAD", "TableFigures", "stated_precisely", "table_figures"]

# How many characters may come before an answer's first citation for it to state the value
# precisely (issue 68): 「RS-3222の最大推力は425 Nです。[1]」, not a row of cells.
PRECISE_LEAD = 60


class TableFigures(msgspec.Struct, omit_defaults=True):
    """One kind's figures: of its answerable questions, the answers holding every gold value
    and those stating it precisely; of its near misses, those answered "not found"."""

    n: int
    value_held_rate: float | None = None
    stated_precisely_rate: float | None = None
    near_misses: int | None = None
    not_found_rate: float | None = None


def stated_precisely(answer: str, values: list[str]) -> bool:
    """Whether the answer's first sentence holds every value, at most PRECISE_LEAD characters
    come before its first citation, and no line of it is a row of cells joined by 「|」."""
    text = unicodedata.normalize("NFKC", answer)
    cited = CITATION.search(text)
    if cited is None or cited.start() > PRECISE_LEAD or "|" in text:
        return False
    first = text.split("。", 1)[0] if "。" in text[:cited.start()] else text[:cited.start()]
    return all(holds_answer(first, value) for value in values)


def table_figures(questions: list[EvalQuestion], answers: list[AskResult]
                  ) -> dict[str, TableFigures]:
    """The figures of each kind the set's table questions ask, and of all of them ("all")."""
    asked = [(q, a) for q, a in zip(questions, answers, strict=True) if q.table]
    figures = {}
    for kind in [*sorted({q.table for q, _ in asked}), "all"]:
        pairs = [(q, a) for q, a in asked if kind in ("all", q.table)]
        answerable = [(_values(q), a) for q, a in pairs if q.answerable and _values(q)]
        near = [a for q, a in pairs if not q.answerable]
        figures[kind] = TableFigures(
            n=len(answerable),
            **({"value_held_rate": rate(sum(a.found and all(holds_answer(a.answer, v)
                                                             for v in values)
                                            for values, a in answerable), len(answerable)),
                "stated_precisely_rate": rate(sum(a.found and stated_precisely(a.answer, values)
                                                  for values, a in answerable),
                                              len(answerable))} if answerable else {}),
            **({"near_misses": len(near),
                "not_found_rate": rate(sum(not a.found for a in near), len(near))}
               if near else {}))
    return figures


def _values(question: EvalQuestion) -> list[str]:
    """The values an answer must hold: every tied one, else the gold answer."""
    return question.answers or ([question.answer] if question.answer else [])
