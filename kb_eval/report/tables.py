"""The rows every form of the report shows: the retrieval table (a row per mode), the table by
question type, the answer measures with their labels, the multi-part figures, and the
conversations' last turns."""

from __future__ import annotations

from collections.abc import Mapping

from msgspec import UnsetType

from kb_eval.answers import AnswerMetrics
from kb_eval.conversations import Asked, ConversationReport, KindFigures, ratios
from kb_eval.parts import PartsMetrics
from kb_eval.retrieval import ModeMetrics
from kb_eval.run import EvalReport
from kb_search import MODES

__all__ = [
    "COLUMNS",
    "CONVERSATION_COLUMNS",
    "FORM_COLUMNS",
    "TYPE_COLUMNS",
    "answer_measures",
    "answer_rows",
    "conversation_measures",
    "conversation_rows",
    "form_rows",
    "mode_rows",
    "parts_rows",
    "short_source",
    "single_answers",
    "type_rows",
]

COLUMNS = ("R@1", "R@5", "R@10", "MRR@10", "nDCG@10")
TYPE_COLUMNS = ("mode", "question type", "n", "R@1", "R@5", "MRR@10")
FORM_COLUMNS = ("form", "n", "answered part by part", "every document cited",
                "every gold text held", "held, parts asked alone")
CONVERSATION_COLUMNS = ("conversations (not a gate)", "n", "follow-up", "standalone asked alone",
                        "its words asked alone", "follow-up ÷ baseline")
_WAYS = ("follow_up", "standalone", "alone")


def mode_rows(results: Mapping[str, ModeMetrics]) -> list[tuple[str, list[float]]]:
    """(mode, values in COLUMNS order) per mode: hybrid, vector, keyword, then any other."""
    modes = [m for m in MODES if m in results]
    modes += [m for m in results if m not in MODES]
    return [(mode, _table_values(results[mode])) for mode in modes]


def _table_values(result: ModeMetrics) -> list[float]:
    """The values of one mode's row, in COLUMNS order."""
    recall = result.recall
    return [recall.at_1, recall.at_5, recall.at_10, result.mrr_at_10, result.ndcg_at_10]


def type_rows(report: EvalReport) -> list[list[str]]:
    """A row per mode and question type, where the set gives types."""
    return [[mode, kind, str(m.n), f"{m.recall.at_1:.4f}", f"{m.recall.at_5:.4f}",
             f"{m.mrr_at_10:.4f}"]
            for mode, metrics in report.modes.items()
            if not isinstance(metrics.by_type, UnsetType)
            for kind, m in metrics.by_type.items()]


def answer_measures(answers: AnswerMetrics) -> list[tuple[str, str, float]]:
    """(name, label, value) of each answer rate; the name is its field's, as in the JSON."""
    return [
        ("cited_expected_rate", "answerable questions answered citing the expected document",
         answers.cited_expected_rate),
        ("not_found_precision", '"not found" precision on the unanswerable questions',
         answers.not_found_precision),
        ("not_found_recall", '"not found" recall on the unanswerable questions',
         answers.not_found_recall),
        ("answerable_not_found_rate", 'answerable questions answered "not found"',
         answers.answerable_not_found_rate),
        ("numbers_match_rate", "found answers whose numbers and codes are all in a cited passage",
         answers.numbers_match_rate),
        ("verified_rate", "answers verified without warnings", answers.verified_rate),
        ("citations_in_order_rate", "found answers whose citations are numbered 1, 2, ... as read",
         answers.citations_in_order_rate),
        *_quotes_measure(answers),
        *_miss_measures(answers),
    ]


def _miss_measures(answers: AnswerMetrics) -> list[tuple[str, str, float]]:
    """Not found on each kind of unanswerable question, where the set tags them."""
    if isinstance(answers.by_miss, UnsetType):
        return []
    return [measure for kind, f in answers.by_miss.items() for measure in (
        (f"not_found_precision_{kind}", f'"not found" precision on the {kind} misses',
         f.not_found_precision),
        (f"not_found_recall_{kind}", f'"not found" recall on the {kind} misses',
         f.not_found_recall))]


def _quotes_measure(answers: AnswerMetrics) -> list[tuple[str, str, float]]:
    """The quotes' measure, where the extractive answerer answered."""
    if isinstance(answers.quotes_hold_answer_rate, UnsetType):
        return []
    return [("quotes_hold_answer_rate",
             "extractive citations whose quote holds the sentences the answer took from it",
             answers.quotes_hold_answer_rate)]


def answer_rows(answers: AnswerMetrics) -> list[tuple[str, str]]:
    """(measure, value) rows of the answer measures, rates as percentages."""
    rows = [(label, f"{value:.1%}") for _, label, value in answer_measures(answers)]
    if answers.forbidden_citations is not None:
        rows.append(("answers citing a document outside the question's groups",
                     str(answers.forbidden_citations)))
    faithfulness = answers.faithfulness()
    if faithfulness is not None:
        rows.append((f"faithfulness, {answers.judge} (not a gate)",
                     f"{faithfulness:.1%} over {answers.judged} answers"))
    if not isinstance(answers.gold_in_answer_rate, UnsetType):
        rows.append(("answerable questions whose answer contains the gold text",
                     f"{answers.gold_in_answer_rate:.1%}"))
        rows.append(("answer length without [n], median / 90th percentile (characters)",
                     f"{answers.answer_chars_median:.0f} / {answers.answer_chars_p90:.0f}"))
    rows.append(("questions: answerable / unanswerable / answered",
                 f"{answers.answerable} / {answers.unanswerable} / {answers.found}"))
    return rows


def single_answers(report: EvalReport) -> AnswerMetrics | None:
    """The answers report, where the set has single questions for it to count."""
    answers = report.answers
    return answers if answers is not None and answers.answerable + answers.unanswerable else None


def parts_rows(parts: PartsMetrics) -> list[tuple[str, str]]:
    """(measure, value) rows of the multi-part figures, rates as percentages."""
    return [
        ("questions (parts)", f"{parts.n} ({parts.parts})"),
        ("answered part by part", f"{parts.answered_in_parts_rate:.1%}"),
        ("questions whose answer cites every answerable part's document",
         f"{parts.all_cited_rate:.1%}"),
        ("answerable parts whose document is cited", f"{parts.part_cited_rate:.1%}"),
        ("questions whose answer holds every answerable part's gold text",
         f"{parts.all_held_rate:.1%} of {parts.gold}"),
        ("the same, each part asked alone (flash)", f"{parts.separate_all_held_rate:.1%}"),
        ("held together against asked alone", f"{parts.held_ratio:.2f}"),
        ("parts no readable document answers, answered anyway",
         f"{parts.unanswerable_answered} of {parts.unanswerable_parts}"),
        ("comparisons stated: right / wrong",
         f"{parts.comparisons_stated}: {parts.comparisons_right} / {parts.comparisons_wrong}"),
        ("answered part's text, median / 90th percentile (characters)",
         f"{parts.part_chars_median:.0f} / {parts.part_chars_p90:.0f}"),
        ("a part's answer asked alone, median / 90th percentile (characters)",
         f"{parts.separate_chars_median:.0f} / {parts.separate_chars_p90:.0f}"),
        ("latency, median / 95th percentile (ms)",
         f"{parts.latency_ms_median:.0f} / {parts.latency_ms_p95:.0f}"),
        ("latency of a part asked alone, median / 95th percentile (ms)",
         f"{parts.separate_latency_ms_median:.0f} / {parts.separate_latency_ms_p95:.0f}"),
        ("single questions answered part by part",
         f"{parts.single_in_parts_rate:.1%} of {parts.single_questions}"),
    ]


def form_rows(parts: PartsMetrics) -> list[list[str]]:
    """A row per form of joining the parts, where the set gives forms (FORM_COLUMNS)."""
    if isinstance(parts.by_form, UnsetType):
        return []
    return [[form, str(m.n), f"{m.answered_in_parts_rate:.1%}", f"{m.all_cited_rate:.1%}",
             f"{m.all_held_rate:.1%}", f"{m.separate_all_held_rate:.1%}"]
            for form, m in parts.by_form.items()]


def _kinds(report: ConversationReport) -> list[tuple[str, KindFigures]]:
    return [*report.kinds.items(), ("all", report.all)]


def _way_measures(kind: str) -> tuple[str, ...]:
    """What a kind's last turns are scored on: "not found" where the caller may not read the
    document asked about, else the document cited and the gold span held."""
    return ("not_found",) if kind == "unreadable" else ("cited", "gold_in_answer")


def conversation_rows(report: ConversationReport) -> list[list[str]]:
    """A row per kind of conversation and one for all (CONVERSATION_COLUMNS): cited / gold of
    each way of asking the last turn ("not found" for the unreadable kind), and the follow-up's
    over its baseline's (`ratios`)."""
    rows = []
    for kind, figures in _kinds(report):
        ways = [" / ".join(f"{getattr(way, m):.3f}" for m in _way_measures(kind))
                for way in (figures.follow_up, figures.standalone, figures.alone)]
        held = ratios(figures, kind)
        rows.append([kind, str(figures.conversations), *ways,
                     f"÷ {held[0]}: {held[1]:.3f} / {held[2]:.3f}" if held else "-"])
    return rows


def conversation_measures(report: ConversationReport) -> dict[str, float]:
    """Every conversation figure as one flat number, named "<kind> <way> <measure>" and
    "<kind> follow_up ÷ <baseline> <measure>"."""
    values: dict[str, float] = {"n": float(report.conversations)}
    for kind, figures in _kinds(report):
        for name in _WAYS:
            way: Asked = getattr(figures, name)
            values |= {f"{kind} {name} {m}": getattr(way, m) for m in _way_measures(kind)}
        if held := ratios(figures, kind):
            values[f"{kind} follow_up ÷ {held[0]} cited"] = held[1]
            values[f"{kind} follow_up ÷ {held[0]} gold_in_answer"] = held[2]
    return values


def short_source(source_uri: str) -> str:
    """The last two path parts: the folder and file a reader recognizes."""
    return "/".join(source_uri.rstrip("/").split("/")[-2:])
