"""The JSON `kb eval --json` prints: a mode's metrics, every mode's, or the answers alone, with
the answers beside the modes when both were measured."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from kb_eval.answers import AnswerMetrics
from kb_eval.retrieval import ModeMetrics
from kb_eval.run import EvalReport

__all__ = ["AllModesPayload", "ModePayload", "json_payload"]


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
