"""Figures as every report gives them: shares and means rounded to four decimals (the JSON of
`kb eval` is compared between installations at the fourth)."""

from __future__ import annotations

__all__ = ["mean", "rate"]


def mean(values: list[float]) -> float:
    """The mean of `values`, rounded; 0.0 for none."""
    return round(sum(values) / len(values), 4) if values else 0.0


def rate(count: int, total: int) -> float:
    """`count` out of `total`, rounded; 0.0 when there is nothing to count."""
    return round(count / total, 4) if total else 0.0
