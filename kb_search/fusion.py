"""How the two legs' votes are weighed for each question, from the evidence each leg gives.

Reciprocal Rank Fusion adds 1 / (k + rank) from each leg. With fixed weights it averages a
strong leg with a weak one, and which leg is strong depends on the corpus and the question: a
vector leg whose best passage stands clearly above its fifth knows something, a keyword leg
whose scores are flat does not. So each leg's vote is weighed by its own margin:

    vector vote  = exp(vector_bias + vector_margin * (best similarity - 5th best)) / (k + rank)
    keyword vote = plan weight * exp(keyword_margin * (1 - 5th best score / best score))
                   * min(1, coverage / FULL_COVERAGE) / (k + rank)

(sql/queries/search.sql). The numbers are fitted by fit/fusion.py from the development sets with
cross-validation and committed in fusion.json. Similarities mean something different for every
embedding model, so the fitted numbers serve only an index of the model they were fitted on;
any other index gets plain RRF (k = 60, no margins), which is what the numbers reduce to at zero.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import msgspec

__all__ = ["FUSION_FILE", "PLAIN", "Fusion", "fusion_for"]

FUSION_FILE = Path(__file__).with_name("fusion.json")


class Fusion(msgspec.Struct, frozen=True):
    k: float = 60.0  # RRF's constant: how fast a vote falls with rank
    vector_bias: float = 0.0  # log of the vector leg's weight against the keyword leg's
    vector_margin: float = 0.0  # how much the vector leg's margin raises its weight
    keyword_margin: float = 0.0  # how much the keyword leg's margin raises its weight
    embedder: str | None = None  # the model it was fitted on; None: any
    note: str = ""  # how it was fitted, with the held-out figures


PLAIN = Fusion()


def fusion_for(model: str | None) -> Fusion:
    """The fitted fusion for an index of embedding `model`, or plain RRF for any other."""
    fitted = _fitted()
    return fitted if model is not None and fitted.embedder == model else PLAIN


@cache
def _fitted() -> Fusion:
    return msgspec.json.decode(FUSION_FILE.read_bytes(), type=Fusion)
