"""The report as plain text, as `kb eval` prints it: the table of modes, each mode's misses,
then the answers and the multi-part figures."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from msgspec import UnsetType

from kb_eval.parts import PartsMetrics
from kb_eval.report.tables import (
    COLUMNS,
    FORM_COLUMNS,
    TYPE_COLUMNS,
    form_rows,
    mode_rows,
    parts_rows,
    single_answers,
    type_rows,
)
from kb_eval.retrieval import ModeMetrics
from kb_eval.run import EvalReport
from kb_eval.table_figures import TableFigures

__all__ = ["compare_modes", "text_report"]


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


def text_report(report: EvalReport) -> str:
    """The report as plain text: the mode table, each mode's misses, then the answers and the
    multi-part figures."""
    lines = [compare_modes(report.modes)] if report.modes else []
    if rows := type_rows(report):
        lines += ["", "by question type:"]
        lines += ["  " + "  ".join(row) for row in [list(TYPE_COLUMNS), *rows]]
    for mode, metrics in report.modes.items():
        lines.append(f"\n{mode}: {len(metrics.misses)} misses at k={report.k}")
        lines += [f"  {miss.question}  → expected {miss.expected_source}, "
                  f"got {', '.join(Path(t).name for t in miss.top)}"
                  for miss in metrics.misses]
    answers = single_answers(report)
    if answers is not None:
        lines += [
            f"\nanswerable questions answered citing the expected document: "
            f"{answers.cited_expected_rate:.1%} of {answers.answerable}",
            f"not found: precision {answers.not_found_precision:.1%}, recall "
            f"{answers.not_found_recall:.1%} over {answers.unanswerable} unanswerable; "
            f"said of {answers.answerable_not_found_rate:.1%} of the answerable",
            *(f"  {kind} misses: precision {f.not_found_precision:.1%}, recall "
              f"{f.not_found_recall:.1%} over {f.unanswerable}"
              for kind, f in ({} if isinstance(answers.by_miss, UnsetType)
                              else answers.by_miss).items()),
            f"numbers and codes found in a cited passage: {answers.numbers_match_rate:.1%}"
            f" of {answers.found} answers; verified answers: {answers.verified_rate:.1%}",
            f"citations numbered 1, 2, ... as read: {answers.citations_in_order_rate:.1%} of "
            f"the found answers",
            f"answers citing a document outside the question's groups: "
            f"{answers.forbidden_citations}",
        ]
        if not isinstance(answers.quotes_hold_answer_rate, UnsetType):
            lines.append(f"extractive citations whose quote holds what the answer took from "
                         f"it: {answers.quotes_hold_answer_rate:.1%}")
        if not isinstance(answers.gold_in_answer_rate, UnsetType):
            lines.append(f"answers containing the gold text: {answers.gold_in_answer_rate:.1%}"
                         f"; answer length median {answers.answer_chars_median:.0f}, 90th "
                         f"percentile {answers.answer_chars_p90:.0f} characters")
        if not isinstance(answers.by_table, UnsetType):
            lines.append("table questions (value held / stated precisely; near misses not "
                         "found):")
            lines += [f"  {kind}: " + "; ".join(_table_line(f)) for kind, f in
                      answers.by_table.items()]
        faithfulness = answers.faithfulness()
        if faithfulness is not None:
            lines.append(f"faithfulness, {answers.judge} (not a gate): "
                         f"{faithfulness:.1%} over {answers.judged} answers")
        lines += [f"  {wrong.question} ({'; '.join(wrong.reasons)}) "
                  f"→ {wrong.answer[:60]!r}" for wrong in answers.wrong]
    if report.parts is not None:
        lines += _parts_lines(report.parts)
    return "\n".join(lines)


def _table_line(figures: TableFigures) -> list[str]:
    said = []
    if figures.value_held_rate is not None:
        said.append(f"{figures.value_held_rate:.1%} / {figures.stated_precisely_rate:.1%} "
                    f"of {figures.n}")
    if figures.not_found_rate is not None:
        said.append(f"near misses {figures.not_found_rate:.1%} of {figures.near_misses}")
    return said


def _parts_lines(parts: PartsMetrics) -> list[str]:
    lines = ["\nmulti-part questions:"]
    lines += [f"  {label}: {value}" for label, value in parts_rows(parts)]
    if rows := form_rows(parts):
        lines += ["  by form:"]
        lines += ["    " + "  ".join(row) for row in [list(FORM_COLUMNS), *rows]]
    lines += [f"  {wrong.question} ({'; '.join(wrong.reasons)}) → {wrong.answer[:60]!r}"
              for wrong in parts.wrong]
    return lines
