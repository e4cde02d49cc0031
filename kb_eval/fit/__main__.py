"""`python -m kb_eval.fit NAME [ARGUMENTS]`: runs the fitter NAME with its own arguments
(`python -m kb_eval.fit NAME --help` lists them)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from kb_eval.fit import answerability_model, fusion_weights, gap_threshold, sentence_model

FITTERS: dict[str, Callable[[list[str]], int]] = {
    "answerability": answerability_model.main,
    "fusion": fusion_weights.main,
    "gaps": gap_threshold.main,
    "sentences": sentence_model.main,
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in FITTERS:
        print(f"usage: python -m kb_eval.fit {{{','.join(FITTERS)}}} [ARGUMENTS]; "
              "python -m kb_eval.fit NAME --help lists a fitter's arguments", file=sys.stderr)
        return 2
    return FITTERS[argv[0]](argv[1:])


sys.exit(main(sys.argv[1:]))
