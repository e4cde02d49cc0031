"""Retrieval and answer metrics for `kb eval` and the evaluation asset, over JSONL question sets.

The metrics are pure functions: the caller runs the searches and passes, per question, the
`source_uri` of each ranked hit (and its text). Hits are chunks, so one document may appear
several times; a document's rank is the rank of its first chunk among the hits (1-based), and
each question has one relevant document. A question that gives its `answer` (a gold span, as
the JaQuAD set does) is scored by passage: a hit counts only when it is a passage of the
expected document that contains the answer (NFKC, white space removed). `run_question_set`
runs a set against one database connection with the real search and answer code, so the same
measurement serves `kb eval`, the Dagster asset and an index generation not yet live.

The results are structs that encode to the JSON `kb eval --json` prints: field order is key
order, and the judge's fields are left out (not null) when no judge ran.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import msgspec
import psycopg
from msgspec import UNSET, UnsetType

from kb_core.progress import report as report_progress
from kb_core.queries import query
from kb_search.answerers.contract import citations, claims
from kb_search.answerers.judge import FaithfulnessJudge
from kb_search.asking import Asker, AskResult, missing_evidence
from kb_search.search import Searcher

__all__ = [
    "COLUMNS",
    "AnswerMetrics",
    "EvalQuestion",
    "EvalReport",
    "Faithfulness",
    "Miss",
    "ModeMetrics",
    "Recall",
    "RefusalPoint",
    "TypeMetrics",
    "WrongAnswer",
    "compare_modes",
    "evaluate",
    "evaluate_answers",
    "holds_answer",
    "is_relevant",
    "judge_answers",
    "load_question_sets",
    "load_questions",
    "mode_rows",
    "numbered_in_order",
    "numbers_match",
    "recall_curve",
    "quotes_hold",
    "refusal_curve",
    "run_question_set",
    "source_matches",
]

_DEPTH = 10  # MRR and nDCG are reported at 10 whatever k is
_MODE_ORDER = ("hybrid", "vector", "keyword")
COLUMNS = ("R@1", "R@5", "R@10", "MRR@10", "nDCG@10")
# The wording of kb_search/answerers/verification.py for a number or code of an answer that
# no passage it cites contains (tests/unit/test_evaluation.py holds the two together).
_UNSUPPORTED = ("number ", "code ")


class EvalQuestion(msgspec.Struct):
    """One line of an eval file."""

    question: str
    expected_source: str | None = None
    answerable: bool = True
    groups: list[str] | None = None
    note: str | None = None
    answer: str | None = None  # the gold span: retrieval is then scored by passage
    question_type: str | None = None  # e.g. JaQuAD's label; figures are also given per type


class Miss(msgspec.Struct):
    """A question whose document is not within the top k, and the first three documents found."""

    question: str
    expected_source: str
    top: list[str]


class Recall(msgspec.Struct):
    """Recall at the cutoffs 1, 5 and 10, keyed "1", "5" and "10" in JSON."""

    at_1: float = msgspec.field(name="1")
    at_5: float = msgspec.field(name="5")
    at_10: float = msgspec.field(name="10")


class TypeMetrics(msgspec.Struct):
    """The retrieval metrics of the questions of one type."""

    n: int
    recall: Recall
    mrr_at_10: float


class ModeMetrics(msgspec.Struct):
    """The retrieval metrics of one search mode (`evaluate`)."""

    n: int  # the questions counted: answerable, with an expected_source
    k: int
    recall_at_k: float
    recall: Recall
    mrr_at_10: float
    ndcg_at_10: float
    misses: list[Miss]
    by_type: dict[str, TypeMetrics] | UnsetType = UNSET  # where the set gives types


class WrongAnswer(msgspec.Struct):
    """An answer that failed a measure, with the reasons and the documents it cites."""

    question: str
    expected_source: str | None
    answerable: bool
    answer: str  # its first 120 characters
    reasons: list[str]
    cited: list[str]


class Faithfulness(msgspec.Struct):
    """The judge's mean faithfulness score over the found answers it could score."""

    judge: str
    judged: int
    judged_faithfulness: float | None  # None when it scored none


class AnswerMetrics(msgspec.Struct):
    """The answer measures (`evaluate_answers`); the judge's fields only when a judge ran."""

    answerable: int
    unanswerable: int
    found: int
    cited_expected_rate: float
    not_found_precision: float
    not_found_recall: float
    answerable_not_found_rate: float  # what KB_MAX_FALSE_NOT_FOUND bounds, end to end
    numbers_match_rate: float
    verified_rate: float
    # Found answers whose [n] run 1, 2, ... in order of first appearance and whose citations
    # are exactly those, in that order.
    citations_in_order_rate: float
    forbidden_citations: int | None  # None when not measured
    wrong: list[WrongAnswer]
    judge: str | UnsetType = UNSET
    judged: int | UnsetType = UNSET
    judged_faithfulness: float | None | UnsetType = UNSET
    # Where the set gives gold answers: the share of answerable questions whose answer contains
    # its gold span, and the length of the answers' text without their [n] markers.
    gold_in_answer_rate: float | UnsetType = UNSET
    answer_chars_median: float | UnsetType = UNSET
    answer_chars_p90: float | UnsetType = UNSET
    # The citations of extractive answers whose quote holds every sentence the answer took from
    # that passage (`quotes_hold`); only where the extractive answerer answered.
    quotes_hold_answer_rate: float | UnsetType = UNSET

    def faithfulness(self) -> float | None:
        """The model-judged faithfulness; None when no judge ran or it scored no answer."""
        return None if isinstance(self.judged_faithfulness, UnsetType) else self.judged_faithfulness


class RefusalPoint(msgspec.Struct):
    """"Not found" at one answerability threshold: what it costs and what it catches."""

    threshold: float
    answerable_refused: float  # share of answerable questions refused
    not_found_recall: float
    not_found_precision: float


class EvalReport(msgspec.Struct):
    """One question set run against one index (`run_question_set`)."""

    questions: int
    k: int
    modes: dict[str, ModeMetrics]
    curves: dict[str, list[float]]  # per mode, Recall@1..10
    answers: AnswerMetrics | None = None  # measured only with an asker
    # "not found" as the answerability threshold moves (KB_MAX_FALSE_NOT_FOUND), with an asker
    refusal_curve: list[RefusalPoint] = msgspec.field(default_factory=list)


def refusal_curve(questions: Sequence[EvalQuestion], refused_by_rule: Sequence[bool],
                  probabilities: Sequence[float], points: int = 40) -> list[RefusalPoint]:
    """"Not found" precision and recall against the share of answerable questions refused,
    at thresholds spread over the answerable questions' probabilities."""
    answerable = [p for q, p in zip(questions, probabilities, strict=True) if q.answerable]
    if not answerable or all(q.answerable for q in questions):
        return []
    ordered = sorted(answerable)
    # From 0 (the rules alone) up to the probability that refuses a quarter of them.
    thresholds = sorted({0.0} | {ordered[min(len(ordered) - 1, int(len(ordered) * i / points / 4))]
                                 for i in range(points + 1)})
    curve = []
    for threshold in thresholds:
        said = [rule or p < threshold
                for rule, p in zip(refused_by_rule, probabilities, strict=True)]
        refused = [s for q, s in zip(questions, said, strict=True) if q.answerable]
        caught = [s for q, s in zip(questions, said, strict=True) if not q.answerable]
        true_not_found = sum(caught)
        curve.append(RefusalPoint(
            threshold=round(threshold, 4), answerable_refused=_rate(sum(refused), len(refused)),
            not_found_recall=_rate(true_not_found, len(caught)),
            not_found_precision=_rate(true_not_found, sum(said))))
    return curve


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


def load_question_sets(paths: Iterable[Path]) -> list[EvalQuestion]:
    """The questions of several eval files, one after the other (KB_EVAL_SETS)."""
    questions = [q for path in paths for q in load_questions(path)]
    if not questions:
        raise ValueError("the question sets hold no question")
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


def is_relevant(question: EvalQuestion, source_uri: str, content: str | None) -> bool:
    """Whether a hit answers `question`: it is from the expected document and, when the
    question gives its answer and the hit's `content` is known, contains it."""
    return source_matches(source_uri, question.expected_source or "") and (
        question.answer is None or content is None or holds_answer(content, question.answer))


def _first_rank(question: EvalQuestion, hits: list[str],
                contents: list[str] | None) -> int | None:
    """The 1-based rank of the first relevant hit (`is_relevant`), or None."""
    for rank, source_uri in enumerate(hits, start=1):
        if is_relevant(question, source_uri, contents[rank - 1] if contents else None):
            return rank
    return None


def holds_answer(text: str, answer: str) -> bool:
    """Whether `text` contains the gold `answer`, NFKC-normalized, white space removed."""
    return _squeezed(answer) in _squeezed(text)


def _squeezed(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).split())


def _distinct(hits: list[str], limit: int) -> list[str]:
    seen: list[str] = []
    for source_uri in hits:
        if source_uri not in seen:
            seen.append(source_uri)
            if len(seen) == limit:
                break
    return seen


def evaluate(questions: list[EvalQuestion], hits: list[list[str]], k: int,
             contents: list[list[str]] | None = None) -> ModeMetrics:
    """The `kb eval` metrics of one search mode; hits[i] are question i's ranked source_uris
    and contents[i] their texts (needed to score a question that gives its answer).

    Only answerable questions with an expected_source count; `n` is their number, and every
    metric is 0.0 when there are none. MRR and nDCG are cut off at 10 (a single relevant
    document, so the ideal DCG is 1). Fetch at least max(k, 10) hits per question, or the @10
    metrics undercount. `misses` lists the questions whose document is not within the top k.
    """
    if len(hits) != len(questions):
        raise ValueError(f"{len(questions)} questions but {len(hits)} hit lists")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    ranks: list[int | None] = []
    misses: list[Miss] = []
    types: dict[str, list[int | None]] = {}
    for i, (question, ranked) in enumerate(zip(questions, hits, strict=True)):
        if not question.answerable or not question.expected_source:
            continue
        rank = _first_rank(question, ranked, contents[i] if contents else None)
        ranks.append(rank)
        if question.question_type:
            types.setdefault(question.question_type, []).append(rank)
        if rank is None or rank > k:
            misses.append(Miss(question=question.question,
                               expected_source=question.expected_source,
                               top=_distinct(ranked, 3)))
    return ModeMetrics(
        n=len(ranks),
        k=k,
        recall_at_k=_recall(ranks, k),
        recall=_recalls(ranks),
        mrr_at_10=_mrr(ranks),
        ndcg_at_10=_mean([1 / math.log2(rank + 1) if _hit(rank, _DEPTH) else 0.0
                          for rank in ranks]),
        misses=misses,
        by_type={t: TypeMetrics(n=len(r), recall=_recalls(r), mrr_at_10=_mrr(r))
                 for t, r in sorted(types.items())} if types else UNSET,
    )


def _recalls(ranks: list[int | None]) -> Recall:
    return Recall(at_1=_recall(ranks, 1), at_5=_recall(ranks, 5), at_10=_recall(ranks, 10))


def _mrr(ranks: list[int | None]) -> float:
    return _mean([1 / rank if _hit(rank, _DEPTH) else 0.0 for rank in ranks])


def recall_curve(questions: list[EvalQuestion], hits: list[list[str]],
                 depth: int = _DEPTH, contents: list[list[str]] | None = None) -> list[float]:
    """Recall@k for k = 1..depth (the plot of the report); counts as `evaluate` does."""
    ranks = [_first_rank(q, ranked, contents[i] if contents else None)
             for i, (q, ranked) in enumerate(zip(questions, hits, strict=True))
             if q.answerable and q.expected_source]
    return [_recall(ranks, k) for k in range(1, depth + 1)]


def _recall(ranks: list[int | None], cutoff: int) -> float:
    return _mean([_hit(rank, cutoff) for rank in ranks])


def _hit(rank: int | None, cutoff: int) -> float:
    return 1.0 if rank is not None and rank <= cutoff else 0.0


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def compare_modes(results: Mapping[str, ModeMetrics]) -> str:
    """A plain-text table of `evaluate` results, one row per mode, for `kb eval --mode all`.

    Rows come in the order hybrid, vector, keyword; any other mode follows in the given order.
    """
    header = ["mode", *COLUMNS]
    rows = [[mode, *(f"{value:.4f}" for value in values)] for mode, values in mode_rows(results)]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join([row[0].ljust(widths[0]),
                   *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))])
        for row in [header, *rows]
    ]
    return "\n".join(lines)


def mode_rows(results: Mapping[str, ModeMetrics]) -> list[tuple[str, list[float]]]:
    """(mode, values in COLUMNS order) per mode: hybrid, vector, keyword, then any other."""
    modes = [m for m in _MODE_ORDER if m in results]
    modes += [m for m in results if m not in _MODE_ORDER]
    return [(mode, _table_values(results[mode])) for mode in modes]


def _table_values(result: ModeMetrics) -> list[float]:
    """The values of one mode's row, in COLUMNS order."""
    recall = result.recall
    return [recall.at_1, recall.at_5, recall.at_10, result.mrr_at_10, result.ndcg_at_10]


def numbers_match(answer: AskResult) -> bool:
    """Whether every number and code of an answer appears in a passage it cites, as the
    answer's verification found (its warnings)."""
    return not any(w.startswith(_UNSUPPORTED) for w in answer.warnings)


def numbered_in_order(answer: AskResult) -> bool:
    """Whether the answer's [n] run 1, 2, ... in the order it first cites them, and its
    citations are those numbers, in that order."""
    expected = list(range(1, len(answer.citations) + 1))
    return citations(answer.answer) == expected and [c.n for c in answer.citations] == expected


def quotes_hold(answer: AskResult) -> list[bool]:
    """For each citation, whether its quote holds every piece of the answer that cites it,
    line by line (a table row is quoted under its header, "…" between them), NFKC, white
    space removed. For the extractive answerer, whose pieces are the sentences it quoted."""
    said = claims(answer.answer)
    return [all(_holds_lines(c.quote, claim.text) for claim in said if c.n in claim.cites)
            for c in answer.citations]


def _holds_lines(quote: str, said: str) -> bool:
    held = _squeezed(quote)
    return all(_squeezed(line) in held for line in said.splitlines() if line.strip())


def evaluate_answers(
    questions: list[EvalQuestion],
    answers: list[AskResult],
    *,
    default_groups: Sequence[str] = (),
    document_groups: Mapping[str, Sequence[str]] | None = None,
) -> AnswerMetrics:
    """Answer quality; `answers[i]` is the `kb ask` result for questions[i].

    - cited_expected_rate: answerable questions answered citing the expected document and no
      document outside the question's groups;
    - not_found_precision / not_found_recall: of "not found" on the unanswerable questions;
      answerable_not_found_rate: answerable questions answered "not found";
    - numbers_match_rate: found answers whose every number and code appears in a passage they
      cite; verified_rate: answers whose verification raised no warning at all;
    - citations_in_order_rate: found answers numbered as read (`numbered_in_order`);
      quotes_hold_answer_rate: the extractive answers' citations whose quote holds what the
      answer took from the passage (`quotes_hold`);
    - forbidden_citations: answers citing a document the question's groups (its own "groups",
      else `default_groups`) may not see, by `document_groups` (source_uri → allowed groups; a
      document missing from it counts as forbidden). Not measured when it is None.
    `wrong` lists every failed answer with its reasons.
    """
    if len(answers) != len(questions):
        raise ValueError(f"{len(answers)} answers for {len(questions)} questions")
    failures = [_answer_failures(q, a, default_groups, document_groups)
                for q, a in zip(questions, answers, strict=True)]
    answerable = [f for q, f in zip(questions, failures, strict=True) if q.answerable]
    unanswerable = sum(1 for q in questions if not q.answerable)
    said_not_found = [q for q, a in zip(questions, answers, strict=True) if not a.found]
    true_not_found = sum(1 for q in said_not_found if not q.answerable)
    found = [a for a in answers if a.found]
    gold = [(q, a) for q, a in zip(questions, answers, strict=True) if q.answerable and q.answer]
    bodies = sorted(len(_CITATION.sub("", a.answer)) for a in found)
    held = [ok for a in found if a.answerer.startswith("extractive") for ok in quotes_hold(a)]
    return AnswerMetrics(
        answerable=len(answerable),
        unanswerable=unanswerable,
        found=len(found),
        cited_expected_rate=_rate(
            sum(1 for f in answerable if not set(f) & _NOT_CITED_EXPECTED), len(answerable)),
        not_found_precision=_rate(true_not_found, len(said_not_found)),
        not_found_recall=_rate(true_not_found, unanswerable),
        answerable_not_found_rate=_rate(len(said_not_found) - true_not_found, len(answerable)),
        numbers_match_rate=_rate(sum(1 for a in found if numbers_match(a)), len(found)),
        verified_rate=_rate(sum(1 for a in answers if a.verified), len(answers)),
        citations_in_order_rate=_rate(sum(1 for a in found if numbered_in_order(a)), len(found)),
        forbidden_citations=(
            None if document_groups is None
            else sum(1 for f in failures if "cites a forbidden document" in f)
        ),
        wrong=[
            WrongAnswer(question=q.question, expected_source=q.expected_source,
                        answerable=q.answerable, answer=a.answer[:120], reasons=f,
                        cited=[c.source_uri for c in a.citations])
            for q, a, f in zip(questions, answers, failures, strict=True) if f
        ],
        **({"gold_in_answer_rate": _rate(sum(1 for q, a in gold if a.found and holds_answer(
                _CITATION.sub("", a.answer), q.answer or "")), len(gold)),
            "answer_chars_median": _quantile(bodies, 0.5),
            "answer_chars_p90": _quantile(bodies, 0.9)} if gold else {}),
        **({"quotes_hold_answer_rate": _rate(sum(held), len(held))} if held else {}),
    )


_CITATION = re.compile(r"\[\d+\]")


def _quantile(values: list[int], share: float) -> float:
    """The nearest-rank quantile of sorted `values` (0.0 for none)."""
    return float(values[max(0, math.ceil(share * len(values)) - 1)]) if values else 0.0


_NOT_CITED_EXPECTED = {"said not found", "does not cite the expected document",
                       "cites a forbidden document"}


def _answer_failures(question: EvalQuestion, answer: AskResult, default_groups: Sequence[str],
                     document_groups: Mapping[str, Sequence[str]] | None) -> list[str]:
    reasons = []
    cited = [c.source_uri for c in answer.citations]
    if question.answerable and not answer.found:
        reasons.append("said not found")
    elif question.answerable and not any(
            source_matches(uri, question.expected_source or "") for uri in cited):
        reasons.append("does not cite the expected document")
    if not question.answerable and answer.found:
        reasons.append("missed not found")
    if answer.found and not numbers_match(answer):
        reasons.append("a number or code is in no cited passage")
    if document_groups is not None:
        groups = set(question.groups if question.groups is not None else default_groups)
        if any(not groups & set(document_groups.get(uri, ())) for uri in cited):
            reasons.append("cites a forbidden document")
    return reasons


def _rate(count: int, total: int) -> float:
    return round(count / total, 4) if total else 0.0


# --- running a question set against one database ---------------------------------------------

def run_question_set(
    conn: psycopg.Connection,
    questions: list[EvalQuestion],
    searcher: Searcher,
    asker: Asker | None = None,
    *,
    groups: Sequence[str] = (),
    k: int = 5,
    modes: Sequence[str] = _MODE_ORDER,
    judge: FaithfulnessJudge | None = None,
) -> EvalReport:
    """Every question searched in each mode (and asked, with an `asker`) on `conn`, with the
    real search and answer code, each under its own "groups" (else `groups`); with a `judge`
    too, the found answers are scored for faithfulness (`judge_answers`).

    `conn` must be configured for search (`configure_search_session`); pointing it at another
    index (a generation) evaluates that index. The report's `answers` is None without an
    `asker`.
    """
    def groups_of(question: EvalQuestion) -> list[str]:
        return list(question.groups if question.groups is not None else groups)

    prepared = [searcher.prepare(q.question) for q in questions]  # one embedding per question
    fetch = max(k, _DEPTH)  # MRR@10 and nDCG@10 need ten hits whatever k is
    report = EvalReport(questions=len(questions), k=k, modes={}, curves={})
    report_progress("questions", count=len(questions) * (len(modes) + (asker is not None)))
    for mode in modes:
        results = [searcher.search(conn, p, groups_of(q), fetch, mode)[0].hits
                   for q, p in _counted(zip(questions, prepared, strict=True))]
        hits = [[h.source_uri for h in found] for found in results]
        contents = [[h.content for h in found] for found in results]
        report.modes[mode] = evaluate(questions, hits, k, contents)
        report.curves[mode] = recall_curve(questions, hits, contents=contents)
    if asker is not None:
        retrieved = [asker.retrieve(conn, q.question, groups_of(q), p)
                     for q, p in _counted(zip(questions, prepared, strict=True))]
        answers = [asker.answer(r, "eval") for r in retrieved]
        report.refusal_curve = refusal_curve(
            questions, [missing_evidence(p.plan, r.search) is not None
                        for p, r in zip(prepared, retrieved, strict=True)],
            [r.answerability for r in retrieved])
        cited = sorted({c.source_uri for a in answers for c in a.citations})
        report.answers = evaluate_answers(
            questions, answers, default_groups=groups,
            document_groups=_document_groups(conn, cited))
        if judge is not None:
            scored = judge_answers(judge, questions, answers)
            report.answers = msgspec.structs.replace(
                report.answers, judge=scored.judge, judged=scored.judged,
                judged_faithfulness=scored.judged_faithfulness)
    return report


def _counted(items: Iterable[tuple]) -> Iterator[tuple]:
    """`items`, reporting each as a question put once the caller is done with it."""
    for item in items:
        yield item
        report_progress("question")


def judge_answers(judge: FaithfulnessJudge, questions: list[EvalQuestion],
                  answers: list[AskResult]) -> Faithfulness:
    """The judge's mean faithfulness score over the found answers it could score, labelled as
    model-judged (`judged_faithfulness` is None when it scored none)."""
    scores = [judge.score(q.question, a.answer, [c.quote for c in a.citations])
              for q, a in zip(questions, answers, strict=True) if a.found]
    judged = [s for s in scores if s is not None]
    return Faithfulness(judge=judge.name, judged=len(judged),
                        judged_faithfulness=_mean(judged) if judged else None)


def _document_groups(conn: psycopg.Connection, source_uris: list[str]) -> dict[str, list[str]]:
    rows = conn.execute(query("documents_groups"), {"uris": source_uris}).fetchall()
    return {uri: list(allowed) for uri, allowed in rows}
