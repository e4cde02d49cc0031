"""The report as one self-contained HTML page (`kb eval --report`): tables, plots and misses,
all inline."""

from __future__ import annotations

import html
from collections.abc import Iterable

from kb_eval.report.plots import recall_svg, refusal_svg
from kb_eval.report.tables import (
    COLUMNS,
    FORM_COLUMNS,
    TYPE_COLUMNS,
    answer_rows,
    form_rows,
    mode_rows,
    parts_rows,
    short_source,
    single_answers,
    type_rows,
)
from kb_eval.run import EvalReport

__all__ = ["render_html"]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 64rem; color: #222;
       padding: 0 1rem; line-height: 1.5; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f1f3f5; }
li { margin: 0.2rem 0; }
code { background: #f1f3f5; padding: 0 0.2rem; }
.meta { color: #555; }
"""


def render_html(report: EvalReport, *, title: str = "検索評価レポート",
                sets: list[str] | None = None, generated: str = "") -> str:
    """The whole report as one HTML document: tables, plot and misses, all inline."""
    esc = html.escape
    meta = [f"{report.questions} questions; misses counted at k={report.k}"]
    if sets:
        meta.append("question sets: " + ", ".join(sets))
    if generated:
        meta.append(f"generated {generated}")
    body = [f"<h1>{esc(title)}</h1>", f'<p class="meta">{esc("; ".join(meta))}</p>']
    if report.modes:
        body += ["<h2>Retrieval</h2>",
                 _html_table(["mode", *COLUMNS],
                             [[mode, *(f"{v:.4f}" for v in row)]
                              for mode, row in mode_rows(report.modes)], "retrieval-metrics"),
                 "<h2>Recall@k against k</h2>",
                 f"<figure>{recall_svg(report.curves)}</figure>"]
    if rows := type_rows(report):
        body += ["<h2>By question type</h2>",
                 _html_table(list(TYPE_COLUMNS), rows, "type-metrics")]
    answers = single_answers(report)
    if answers is not None:
        body += ["<h2>Answers</h2>",
                 _html_table(["measure", "value"], [list(row) for row in answer_rows(answers)],
                             "answer-metrics")]
    if report.parts is not None:
        body += ["<h2>Multi-part questions</h2>",
                 _html_table(["measure", "value"],
                             [list(row) for row in parts_rows(report.parts)], "parts-metrics")]
        if rows := form_rows(report.parts):
            body.append(_html_table(list(FORM_COLUMNS), rows, "parts-by-form"))
    if report.refusal_curve:
        body += ['<h2>"Not found" against answerable questions refused</h2>',
                 f"<figure>{refusal_svg(report.refusal_curve)}</figure>",
                 _html_table(["threshold", "answerable refused", "not found recall",
                              "not found precision"],
                             [[f"{p.threshold:.4f}", f"{p.answerable_refused:.1%}",
                               f"{p.not_found_recall:.1%}", f"{p.not_found_precision:.1%}"]
                              for p in report.refusal_curve], "refusal-curve")]
    body.append("<h2>Misses</h2>")
    for mode, result in report.modes.items():
        body.append(f"<h3>{esc(mode)}: {len(result.misses)} misses</h3>")
        body.append(_html_list(
            f"{esc(m.question)} → expected <code>{esc(m.expected_source)}</code>; top: "
            + ", ".join(f"<code>{esc(short_source(t))}</code>" for t in m.top)
            for m in result.misses))
    if answers is not None:
        body.append(f"<h3>answers: {len(answers.wrong)} wrong</h3>")
        body.append(_html_list(
            f"{esc(w.question)} ({esc('; '.join(w.reasons))}) → {esc(w.answer)}"
            for w in answers.wrong))
    if report.parts is not None:
        body.append(f"<h3>multi-part answers: {len(report.parts.wrong)} wrong</h3>")
        body.append(_html_list(
            f"{esc(w.question)} ({esc('; '.join(w.reasons))}) → {esc(w.answer)}"
            for w in report.parts.wrong))
    return (f'<!DOCTYPE html>\n<html lang="ja"><head><meta charset="utf-8">'
            f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _html_table(header: list[str], rows: list[list[str]], css_id: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f'<table id="{css_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _html_list(items: Iterable[str]) -> str:
    entries = "".join(f"<li>{item}</li>" for item in items)
    return f"<ul>{entries}</ul>" if entries else "<p>none</p>"
