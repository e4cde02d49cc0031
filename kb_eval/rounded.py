"""Figures as every report gives them: shares and means rounded to four decimals (the JSON of
`kb eval` is compared between installations at the fourth)."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["mean", "quantile", "rate"]


def mean(values: list[float]) -> float:
    """The mean of `values`, rounded; 0.0 for none."""
    return round(sum(values) / len(values), 4) if values else 0.0


def rate(count: int, total: int) -> float:
    """`count` out of `total`, rounded; 0.0 when there is nothing to count."""
    return round(count / total, 4) if total else 0.0


def quantile(values: Sequence[float], share: float) -> float:
    """The nearest-rank quantile of sorted `values` (0.0 for none)."""
    return float(values[max(0, math.ceil(share * len(values)) - 1)]) if values else 0.0
