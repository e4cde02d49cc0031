"""Retrieval metrics for `kb eval`: Recall@k, MRR@10 and nDCG@10 over a JSONL question set.

Pure functions: the caller runs the searches and passes, per question, the `source_uri` of each
ranked hit. Hits are chunks, so one document may appear several times; a document's rank is the
rank of its first chunk among the hits (1-based), and each question has one relevant document.
"""

from __future__ import annotations

import math
import unicodedata
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "EvalQuestion",
    "compare_modes",
    "evaluate",
    "evaluate_answers",
    "load_questions",
    "source_matches",
]

_CUTOFFS = (1, 5, 10)
_DEPTH = 10  # MRR and nDCG are reported at 10 whatever k is
_MODE_ORDER = ("hybrid", "vector", "keyword")
_COLUMNS = ("R@1", "R@5", "R@10", "MRR@10", "nDCG@10")


class EvalQuestion(msgspec.Struct):
    """One line of an eval file."""

    question: str
    expected_source: str | None = None
    answerable: bool = True
    groups: list[str] | None = None
    note: str | None = None


def load_questions(path: Path, *, need_expected: bool = True) -> list[EvalQuestion]:
    """The questions of a JSONL eval file, in file order; blank lines are skipped.

    Raises ValueError naming the file and line for a line that is not a JSON object with a
    non-empty "question", has a field of the wrong type, or (with `need_expected`, as for
    evaluation) is answerable without an expected_source.
    """
    questions: list[EvalQuestion] = []
    # utf-8-sig: files saved by Windows editors often start with a BOM.
    with open(path, encoding="utf-8-sig") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            questions.append(_parse_line(line, f"{path}, line {number}", need_expected))
    return questions


def _parse_line(line: str, where: str, need_expected: bool) -> EvalQuestion:
    try:
        question = msgspec.json.decode(line, type=EvalQuestion)
    except msgspec.DecodeError as err:  # also msgspec.ValidationError, its subclass
        raise ValueError(f"{where}: {err}") from err
    if not question.question.strip():
        raise ValueError(f"{where}: \"question\" is empty")
    if need_expected and question.answerable and not question.expected_source:
        raise ValueError(f"{where}: an answerable question needs \"expected_source\"")
    return question


def source_matches(source_uri: str, expected: str) -> bool:
    """Whether a hit's source_uri is the expected document.

    True when they are equal or source_uri ends with expected at a path boundary, so
    "hr/就業規則.md" matches "/x/docs/hr/就業規則.md" but "就業規則.md" does not match
    "/x/docs/hr/旧就業規則.md". Both are NFC-normalized first: some file systems (macOS,
    shares mounted from it) hand out NFD names, where ガ is カ plus a combining mark.
    """
    source = unicodedata.normalize("NFC", source_uri)
    expected = unicodedata.normalize("NFC", expected)
    if not expected or not source.endswith(expected):
        return False
    prefix = source[: len(source) - len(expected)]
    return not prefix or prefix.endswith("/") or expected.startswith("/")


def _first_rank(hits: list[str], expected: str) -> int | None:
    """The 1-based rank of the first hit from the expected document, or None."""
    for rank, source_uri in enumerate(hits, start=1):
        if source_matches(source_uri, expected):
            return rank
    return None


def _distinct(hits: list[str], limit: int) -> list[str]:
    seen: list[str] = []
    for source_uri in hits:
        if source_uri not in seen:
            seen.append(source_uri)
            if len(seen) == limit:
                break
    return seen


def evaluate(questions: list[EvalQuestion], hits: list[list[str]], k: int) -> dict[str, Any]:
    """The `kb eval` metrics of one search mode; hits[i] are question i's ranked source_uris.

    Only answerable questions with an expected_source count; "n" is their number, and every
    metric is 0.0 when there are none. MRR and nDCG are cut off at 10 (a single relevant
    document, so the ideal DCG is 1). Fetch at least max(k, 10) hits per question, or the @10
    metrics undercount. "misses" lists the questions whose document is not within the top k.
    """
    if len(hits) != len(questions):
        raise ValueError(f"{len(questions)} questions but {len(hits)} hit lists")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    ranks: list[int | None] = []
    misses: list[dict[str, Any]] = []
    for question, ranked in zip(questions, hits, strict=True):
        if not question.answerable or not question.expected_source:
            continue
        rank = _first_rank(ranked, question.expected_source)
        ranks.append(rank)
        if rank is None or rank > k:
            misses.append({"question": question.question,
                           "expected_source": question.expected_source,
                           "top": _distinct(ranked, 3)})
    return {
        "n": len(ranks),
        "k": k,
        "recall_at_k": _mean([_hit(rank, k) for rank in ranks]),
        "recall": {str(cut): _mean([_hit(rank, cut) for rank in ranks]) for cut in _CUTOFFS},
        "mrr_at_10": _mean([1 / rank if _hit(rank, _DEPTH) else 0.0 for rank in ranks]),
        "ndcg_at_10": _mean([1 / math.log2(rank + 1) if _hit(rank, _DEPTH) else 0.0
                             for rank in ranks]),
        "misses": misses,
    }


def _hit(rank: int | None, cutoff: int) -> float:
    return 1.0 if rank is not None and rank <= cutoff else 0.0


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def compare_modes(results: dict[str, dict[str, Any]]) -> str:
    """A plain-text table of `evaluate` results, one row per mode, for `kb eval --mode all`.

    Rows come in the order hybrid, vector, keyword; any other mode follows in the given order.
    """
    modes = [m for m in _MODE_ORDER if m in results]
    modes += [m for m in results if m not in _MODE_ORDER]
    header = ["mode", *_COLUMNS]
    rows = [[mode, *(f"{value:.4f}" for value in _table_values(results[mode]))] for mode in modes]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join([row[0].ljust(widths[0]),
                   *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))])
        for row in [header, *rows]
    ]
    return "\n".join(lines)


def _table_values(result: dict[str, Any]) -> list[float]:
    """The values of one mode's row, in _COLUMNS order."""
    recall = result["recall"]
    return [recall["1"], recall["5"], recall["10"], result["mrr_at_10"], result["ndcg_at_10"]]


def evaluate_answers(questions: list[EvalQuestion], answers: list[dict]) -> dict:
    """Answer quality: how often an answerable question is answered citing the expected
    document, and the precision and recall of "not found" on unanswerable questions.

    `answers[i]` is the `kb ask` JSON for questions[i].
    """
    if len(answers) != len(questions):
        raise ValueError(f"{len(answers)} answers for {len(questions)} questions")
    answerable = [(q, a) for q, a in zip(questions, answers, strict=True) if q.answerable]
    cited_expected = sum(
        1 for q, a in answerable
        if a["found"] and any(source_matches(c["source_uri"], q.expected_source or "")
                              for c in a["citations"])
    )
    said_not_found = [q for q, a in zip(questions, answers, strict=True) if not a["found"]]
    true_not_found = sum(1 for q in said_not_found if not q.answerable)
    unanswerable = sum(1 for q in questions if not q.answerable)
    return {
        "answerable": len(answerable),
        "unanswerable": unanswerable,
        "cited_expected_rate": round(cited_expected / len(answerable), 4) if answerable else 0.0,
        "not_found_precision": (
            round(true_not_found / len(said_not_found), 4) if said_not_found else 0.0
        ),
        "not_found_recall": round(true_not_found / unanswerable, 4) if unanswerable else 0.0,
        "verified_rate": round(
            sum(1 for a in answers if a["verified"]) / len(answers), 4) if answers else 0.0,
        "wrong": [
            {"question": q.question, "expected_source": q.expected_source,
             "answerable": q.answerable, "answer": a["answer"][:120]}
            for q, a in zip(questions, answers, strict=True)
            if (q.answerable and not any(
                source_matches(c["source_uri"], q.expected_source or "")
                for c in a["citations"]) ) or (not q.answerable and a["found"])
        ],
    }
