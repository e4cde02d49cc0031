"""The JSON `kb eval --json` prints: a mode's metrics, every mode's, or the answers alone, with
the answers beside the modes when both were measured, and the multi-part figures ("parts") only
where the set has multi-part questions and answers were measured."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from kb_eval.answers import AnswerMetrics
from kb_eval.parts import PartsMetrics
from kb_eval.retrieval import ModeMetrics
from kb_eval.run import EvalReport

__all__ = ["AllModesPayload", "AnswersPayload", "ModePayload", "json_payload"]


class ModePayload(ModeMetrics):
    """`kb eval --mode MODE --json`: that mode's metrics, and the answers with --answers."""

    answers: AnswerMetrics | UnsetType = UNSET
    parts: PartsMetrics | UnsetType = UNSET


class AllModesPayload(msgspec.Struct):
    """`kb eval --mode all --json`: every mode's metrics, and the answers with --answers."""

    modes: dict[str, ModeMetrics]
    answers: AnswerMetrics | UnsetType = UNSET
    parts: PartsMetrics | UnsetType = UNSET


class AnswersPayload(AnswerMetrics):
    """`kb eval --answers --json` of a set with multi-part questions: the answers report of its
    single questions, and the multi-part figures."""

    parts: PartsMetrics | UnsetType = UNSET


def json_payload(
    report: EvalReport, mode: str | None,
) -> ModePayload | AllModesPayload | AnswerMetrics | None:
    """What `kb eval --json` prints for `--mode MODE` ("all" for every mode) or, with no mode
    (`--answers` alone), the answers report by itself."""
    answers = UNSET if report.answers is None else report.answers
    parts = UNSET if report.parts is None else report.parts
    if mode == "all":
        return AllModesPayload(modes=report.modes, answers=answers, parts=parts)
    if mode is not None:
        return ModePayload(**msgspec.structs.asdict(report.modes[mode]), answers=answers,
                           parts=parts)
    if report.answers is not None and report.parts is not None:
        return AnswersPayload(**msgspec.structs.asdict(report.answers), parts=report.parts)
    return report.answers
