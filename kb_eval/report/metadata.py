"""The report as the Dagster UI shows it: Markdown tables, the misses, and every metric as one
flat number (Dagster plots them over materializations). The multi-part and conversation figures
are reported beside the others and gate nothing (kb_pipeline/defs/evaluation/checks.py reads
none)."""

from __future__ import annotations

import html

import msgspec

from kb_eval.report.tables import (
    COLUMNS,
    CONVERSATION_COLUMNS,
    FORM_COLUMNS,
    TYPE_COLUMNS,
    answer_measures,
    answer_rows,
    conversation_measures,
    conversation_rows,
    form_rows,
    mode_rows,
    parts_rows,
    short_source,
    type_rows,
)
from kb_eval.run import EvalReport

__all__ = ["metric_values", "metrics_markdown", "misses_markdown"]

MISSES_SHOWN = 30  # per mode and for answers; the rest is counted


def metric_values(report: EvalReport) -> dict[str, float]:
    """Every metric as one flat number, named "<mode> <column>", "answers <measure>",
    "parts <figure>" or "conversations <kind> <way> <measure>"."""
    values = {f"{mode} {column}": value
              for mode, row in mode_rows(report.modes)
              for column, value in zip(COLUMNS, row, strict=True)}
    answers = report.answers
    if answers is not None:
        values |= {f"answers {key}": float(value) for key, _, value in answer_measures(answers)}
        if answers.forbidden_citations is not None:
            values["answers forbidden_citations"] = float(answers.forbidden_citations)
        faithfulness = answers.faithfulness()
        if faithfulness is not None:
            values["answers judged_faithfulness (model-judged)"] = float(faithfulness)
    if report.parts is not None:
        values |= {f"parts {name}": float(value)
                   for name, value in msgspec.structs.asdict(report.parts).items()
                   if isinstance(value, int | float)}
    if report.conversations is not None:
        values |= {f"conversations {name}": value
                   for name, value in conversation_measures(report.conversations).items()}
    return values


def metrics_markdown(report: EvalReport) -> str:
    """The metrics as Markdown tables: one row per mode, then the answer measures."""
    lines = [f"{report.questions} questions; misses counted at k={report.k}.", "",
             _md_row(["mode", *COLUMNS]), _md_row(["---"] * (len(COLUMNS) + 1))]
    lines += [_md_row([mode, *(f"{v:.4f}" for v in row)])
              for mode, row in mode_rows(report.modes)]
    if rows := type_rows(report):
        lines += ["", _md_row(list(TYPE_COLUMNS)), _md_row(["---"] * len(TYPE_COLUMNS))]
        lines += [_md_row(row) for row in rows]
    if report.answers is not None:
        lines += ["", _md_row(["measure", "value"]), _md_row(["---", "---"])]
        lines += [_md_row([label, value]) for label, value in answer_rows(report.answers)]
    if report.parts is not None:
        lines += ["", _md_row(["multi-part measure (not a gate)", "value"]),
                  _md_row(["---", "---"])]
        lines += [_md_row([label, value]) for label, value in parts_rows(report.parts)]
        if rows := form_rows(report.parts):
            lines += ["", _md_row(list(FORM_COLUMNS)), _md_row(["---"] * len(FORM_COLUMNS))]
            lines += [_md_row(row) for row in rows]
    if report.conversations is not None:
        lines += ["", "Conversations: the last turn asked as a follow-up, its standalone form "
                  "asked alone, its own words asked alone; cited / gold (the unreadable kind: "
                  "not found).", "", _md_row(list(CONVERSATION_COLUMNS)),
                  _md_row(["---"] * len(CONVERSATION_COLUMNS))]
        lines += [_md_row(row) for row in conversation_rows(report.conversations)]
    return "\n".join(lines)


def misses_markdown(report: EvalReport) -> str:
    """Each mode's misses with their top hits, then the wrong answers with their reasons."""
    lines: list[str] = []
    for mode, result in report.modes.items():
        misses = result.misses
        lines += [f"### {mode}: {len(misses)} misses at k={result.k}", ""]
        lines += [f"- {_md(m.question)} → expected `{m.expected_source}`; top: "
                  + ", ".join(f"`{short_source(t)}`" for t in m.top)
                  for m in misses[:MISSES_SHOWN]]
        lines += _more(len(misses)) + [""]
    if report.answers is not None:
        wrong = report.answers.wrong
        lines += [f"### answers: {len(wrong)} wrong", ""]
        lines += [f"- {_md(w.question)} ({'; '.join(w.reasons)}) → {_md(w.answer)}"
                  for w in wrong[:MISSES_SHOWN]]
        lines += _more(len(wrong))
    if report.parts is not None:
        wrong_parts = report.parts.wrong
        lines += ["", f"### multi-part answers: {len(wrong_parts)} wrong", ""]
        lines += [f"- {_md(w.question)} ({_md('; '.join(w.reasons))}) → {_md(w.answer)}"
                  for w in wrong_parts[:MISSES_SHOWN]]
        lines += _more(len(wrong_parts))
    return "\n".join(lines).strip() or "no misses"


def _more(count: int) -> list[str]:
    return [f"- … and {count - MISSES_SHOWN} more"] if count > MISSES_SHOWN else []


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _md(text: str) -> str:
    """Text safe inside a Markdown list item or table cell."""
    return html.escape(" ".join(text.split())).replace("|", "\\|").replace("`", "'")
