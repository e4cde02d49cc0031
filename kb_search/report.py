"""The evaluation report: one `run_question_set` result as Markdown (the Dagster UI), flat
numbers (Dagster plots them over materializations), plain text (`kb eval`), the `kb eval --json`
payload and one self-contained HTML file with a hand-drawn SVG plot of Recall@k against k per
mode (`kb eval --report`).

Nothing here loads from outside the file: no scripts, fonts, images or style sheets by URL.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable
from pathlib import Path

import msgspec
from msgspec import UNSET, UnsetType

from kb_search.evaluation import (
    COLUMNS,
    AnswerMetrics,
    EvalReport,
    ModeMetrics,
    RefusalPoint,
    compare_modes,
    mode_rows,
)

__all__ = [
    "AllModesPayload",
    "ModePayload",
    "answer_rows",
    "json_payload",
    "metric_values",
    "metrics_markdown",
    "misses_markdown",
    "recall_svg",
    "refusal_svg",
    "render_html",
    "svg_data_uri",
    "text_report",
]

MISSES_SHOWN = 30  # per mode and for answers; the rest is counted
_COLOURS = {"hybrid": "#1f6feb", "vector": "#d9480f", "keyword": "#2f9e44"}
_OTHER_COLOURS = ("#9c36b5", "#495057", "#c2255c")


def _answer_measures(answers: AnswerMetrics) -> list[tuple[str, str, float]]:
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
    ]


def _quotes_measure(answers: AnswerMetrics) -> list[tuple[str, str, float]]:
    """The quotes' measure, where the extractive answerer answered."""
    if isinstance(answers.quotes_hold_answer_rate, UnsetType):
        return []
    return [("quotes_hold_answer_rate",
             "extractive citations whose quote holds the sentences the answer took from it",
             answers.quotes_hold_answer_rate)]


def answer_rows(answers: AnswerMetrics) -> list[tuple[str, str]]:
    """(measure, value) rows of the answer measures, rates as percentages."""
    rows = [(label, f"{value:.1%}") for _, label, value in _answer_measures(answers)]
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


TYPE_COLUMNS = ("mode", "question type", "n", "R@1", "R@5", "MRR@10")


def type_rows(report: EvalReport) -> list[list[str]]:
    """A row per mode and question type, where the set gives types."""
    return [[mode, kind, str(m.n), f"{m.recall.at_1:.4f}", f"{m.recall.at_5:.4f}",
             f"{m.mrr_at_10:.4f}"]
            for mode, metrics in report.modes.items()
            if not isinstance(metrics.by_type, UnsetType)
            for kind, m in metrics.by_type.items()]


def metric_values(report: EvalReport) -> dict[str, float]:
    """Every metric as one flat number, named "<mode> <column>" or "answers <measure>"."""
    values = {f"{mode} {column}": value
              for mode, row in mode_rows(report.modes)
              for column, value in zip(COLUMNS, row, strict=True)}
    answers = report.answers
    if answers is not None:
        values |= {f"answers {key}": float(value) for key, _, value in _answer_measures(answers)}
        if answers.forbidden_citations is not None:
            values["answers forbidden_citations"] = float(answers.forbidden_citations)
        faithfulness = answers.faithfulness()
        if faithfulness is not None:
            values["answers judged_faithfulness (model-judged)"] = float(faithfulness)
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
    return "\n".join(lines)


def misses_markdown(report: EvalReport) -> str:
    """Each mode's misses with their top hits, then the wrong answers with their reasons."""
    lines: list[str] = []
    for mode, result in report.modes.items():
        misses = result.misses
        lines += [f"### {mode}: {len(misses)} misses at k={result.k}", ""]
        lines += [f"- {_md(m.question)} → expected `{m.expected_source}`; top: "
                  + ", ".join(f"`{_short(t)}`" for t in m.top)
                  for m in misses[:MISSES_SHOWN]]
        lines += _more(len(misses)) + [""]
    if report.answers is not None:
        wrong = report.answers.wrong
        lines += [f"### answers: {len(wrong)} wrong", ""]
        lines += [f"- {_md(w.question)} ({'; '.join(w.reasons)}) → {_md(w.answer)}"
                  for w in wrong[:MISSES_SHOWN]]
        lines += _more(len(wrong))
    return "\n".join(lines).strip() or "no misses"


def _more(count: int) -> list[str]:
    return [f"- … and {count - MISSES_SHOWN} more"] if count > MISSES_SHOWN else []


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _md(text: str) -> str:
    """Text safe inside a Markdown list item or table cell."""
    return html.escape(" ".join(text.split())).replace("|", "\\|").replace("`", "'")


def _short(source_uri: str) -> str:
    """The last two path parts: the folder and file a reader recognizes."""
    return "/".join(source_uri.rstrip("/").split("/")[-2:])


# --- the plot --------------------------------------------------------------------------------

def recall_svg(curves: dict[str, list[float]], width: int = 560, height: int = 320) -> str:
    """Recall@k against k (1..n) per mode as an inline SVG line chart."""
    left, right, top, bottom = 52, 110, 20, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    depth = max((len(c) for c in curves.values()), default=1)
    lowest = min((v for c in curves.values() for v in c), default=0.0)
    y_min = min(0.9, int(lowest * 10) / 10)  # zoom in when every mode does well

    def x(k: int) -> float:
        return left + (k - 1) * plot_w / max(depth - 1, 1)

    def y(value: float) -> float:
        return top + (1 - (value - y_min) / (1 - y_min)) * plot_h if y_min < 1 else top

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="Recall@k against k" '
             'font-family="sans-serif" font-size="12">',
             f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" '
             'stroke="#ccc"/>']
    steps = 5
    for i in range(steps + 1):
        value = y_min + (1 - y_min) * i / steps
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.1f}" '
                     f'y2="{y(value):.1f}" stroke="#e5e5e5"/>'
                     f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">'
                     f'{value:.2f}</text>')
    for k in range(1, depth + 1):
        parts.append(f'<text x="{x(k):.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
                     f'{k}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle">'
                 'k</text>')
    parts.append(f'<text x="14" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {top + plot_h / 2:.1f})">Recall@k</text>')
    for i, (mode, curve) in enumerate(curves.items()):
        colour = _COLOURS.get(mode, _OTHER_COLOURS[i % len(_OTHER_COLOURS)])
        points = " ".join(f"{x(k):.1f},{y(v):.1f}" for k, v in enumerate(curve, start=1))
        parts.append(f'<polyline class="curve" data-mode="{html.escape(mode)}" fill="none" '
                     f'stroke="{colour}" stroke-width="2" points="{points}"/>')
        parts += [f'<circle cx="{x(k):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}">'
                  f'<title>{html.escape(mode)} Recall@{k} = {v:.4f}</title></circle>'
                  for k, v in enumerate(curve, start=1)]
        legend_y = top + 14 + 18 * i
        parts.append(f'<line x1="{left + plot_w + 12}" x2="{left + plot_w + 32}" '
                     f'y1="{legend_y - 4}" y2="{legend_y - 4}" stroke="{colour}" '
                     f'stroke-width="2"/><text x="{left + plot_w + 38}" y="{legend_y}">'
                     f'{html.escape(mode)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def refusal_svg(curve: list[RefusalPoint], width: int = 560, height: int = 320) -> str:
    """"Not found" recall and precision against the share of answerable questions refused,
    as the answerability threshold moves (KB_MAX_FALSE_NOT_FOUND picks a point)."""
    left, right, top, bottom = 52, 110, 20, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    x_max = max(0.05, max((p.answerable_refused for p in curve), default=0.0))

    def x(share: float) -> float:
        return left + share / x_max * plot_w

    def y(value: float) -> float:
        return top + (1 - value) * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="not found against refused"'
             ' font-family="sans-serif" font-size="12">',
             f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" '
             'stroke="#ccc"/>']
    for i in range(6):
        value, share = i / 5, x_max * i / 5
        parts.append(f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">'
                     f'{value:.1f}</text><text x="{x(share):.1f}" y="{top + plot_h + 16}" '
                     f'text-anchor="middle">{share:.0%}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle">'
                 'answerable questions refused</text>')
    series = (("recall", "#1f6feb", [p.not_found_recall for p in curve]),
              ("precision", "#d9480f", [p.not_found_precision for p in curve]))
    for i, (name, colour, values) in enumerate(series):
        points = " ".join(f"{x(p.answerable_refused):.1f},{y(v):.1f}"
                          for p, v in zip(curve, values, strict=True))
        parts.append(f'<polyline class="refusal" data-series="{name}" fill="none" '
                     f'stroke="{colour}" stroke-width="2" points="{points}"/>')
        legend_y = top + 14 + 18 * i
        parts.append(f'<line x1="{left + plot_w + 12}" x2="{left + plot_w + 32}" '
                     f'y1="{legend_y - 4}" y2="{legend_y - 4}" stroke="{colour}" '
                     f'stroke-width="2"/><text x="{left + plot_w + 38}" y="{legend_y}">'
                     f'not found {name}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def svg_data_uri(svg: str) -> str:
    """The SVG as a data: URI, for Markdown image syntax in the Dagster UI."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


# --- the HTML file ---------------------------------------------------------------------------

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
    if report.answers is not None:
        body += ["<h2>Answers</h2>",
                 _html_table(["measure", "value"],
                             [list(row) for row in answer_rows(report.answers)],
                             "answer-metrics")]
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
            + ", ".join(f"<code>{esc(_short(t))}</code>" for t in m.top)
            for m in result.misses))
    if report.answers is not None:
        wrong = report.answers.wrong
        body.append(f"<h3>answers: {len(wrong)} wrong</h3>")
        body.append(_html_list(
            f"{esc(w.question)} ({esc('; '.join(w.reasons))}) → {esc(w.answer)}"
            for w in wrong))
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


# --- the text report and the JSON (`kb eval`) -----------------------------------------------

def text_report(report: EvalReport) -> str:
    """The report as plain text: the mode table, each mode's misses, then the answers."""
    lines = [compare_modes(report.modes)] if report.modes else []
    if rows := type_rows(report):
        lines += ["", "by question type:"]
        lines += ["  " + "  ".join(row) for row in [list(TYPE_COLUMNS), *rows]]
    for mode, metrics in report.modes.items():
        lines.append(f"\n{mode}: {len(metrics.misses)} misses at k={report.k}")
        lines += [f"  {miss.question}  → expected {miss.expected_source}, "
                  f"got {', '.join(Path(t).name for t in miss.top)}"
                  for miss in metrics.misses]
    answers = report.answers
    if answers is not None:
        lines += [
            f"\nanswerable questions answered citing the expected document: "
            f"{answers.cited_expected_rate:.1%} of {answers.answerable}",
            f"not found: precision {answers.not_found_precision:.1%}, recall "
            f"{answers.not_found_recall:.1%} over {answers.unanswerable} unanswerable; "
            f"said of {answers.answerable_not_found_rate:.1%} of the answerable",
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
        faithfulness = answers.faithfulness()
        if faithfulness is not None:
            lines.append(f"faithfulness, {answers.judge} (not a gate): "
                         f"{faithfulness:.1%} over {answers.judged} answers")
        lines += [f"  {wrong.question} ({'; '.join(wrong.reasons)}) "
                  f"→ {wrong.answer[:60]!r}" for wrong in answers.wrong]
    return "\n".join(lines)


class ModePayload(ModeMetrics):
    """`kb eval --mode MODE --json`: that mode's metrics, and the answers with --answers."""

    answers: AnswerMetrics | UnsetType = UNSET


class AllModesPayload(msgspec.Struct):
    """`kb eval --mode all --json`: every mode's metrics, and the answers with --answers."""

    modes: dict[str, ModeMetrics]
    answers: AnswerMetrics | UnsetType = UNSET


def json_payload(report: EvalReport,
                 mode: str | None) -> ModePayload | AllModesPayload | AnswerMetrics | None:
    """What `kb eval --json` prints for `--mode MODE` ("all" for every mode) or, with no mode
    (`--answers` alone), the answers report by itself."""
    answers = UNSET if report.answers is None else report.answers
    if mode == "all":
        return AllModesPayload(modes=report.modes, answers=answers)
    if mode is not None:
        return ModePayload(**msgspec.structs.asdict(report.modes[mode]), answers=answers)
    return report.answers
