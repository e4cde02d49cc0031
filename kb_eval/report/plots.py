"""The report's plots as inline SVG drawn by hand: Recall@k against k per mode, and "not found"
against the answerable questions refused; and an SVG as a data: URI for Markdown."""

from __future__ import annotations

import base64
import html

from kb_eval.refusals import RefusalPoint

__all__ = ["recall_svg", "refusal_svg", "svg_data_uri"]

_COLOURS = {"hybrid": "#1f6feb", "vector": "#d9480f", "keyword": "#2f9e44", "graph": "#9c36b5"}
_OTHER_COLOURS = ("#9c36b5", "#495057", "#c2255c")


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
