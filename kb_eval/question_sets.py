"""The question sets: JSONL files of questions with the document (and, for JaQuAD, the gold
span) that answers each, and the rules by which a hit or an answer counts as that document.

A question with several parts (Deep mode: 「育児休業と介護休業の申請期限は？」) carries `parts`,
each with its own document and gold span, instead of one top-level expected_source."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import msgspec

__all__ = [
    "EvalPart",
    "EvalQuestion",
    "holds_answer",
    "is_relevant",
    "load_question_sets",
    "load_questions",
    "source_matches",
    "squeezed",
]


class EvalPart(msgspec.Struct, omit_defaults=True):
    """One part of a multi-part question, as it would be asked alone."""

    question: str
    expected_source: str | None = None
    answer: str | None = None
    answerable: bool = True  # False: no document the caller may read answers this part


class EvalQuestion(msgspec.Struct, omit_defaults=True):
    """One line of an eval file."""

    question: str
    expected_source: str | None = None
    answerable: bool = True
    # Of an unanswerable question, how near the documents come: "near", they talk about its
    # topic but not the answer (ZP-2041's price); "far", they hold nothing on it (社員食堂).
    miss: Literal["near", "far"] | None = None
    groups: list[str] | None = None
    note: str | None = None
    answer: str | None = None  # the gold span: retrieval is then scored by passage
    question_type: str | None = None  # e.g. JaQuAD's label; figures are also given per type
    parts: list[EvalPart] | None = None  # a multi-part question: each part is scored on its own
    form: str | None = None  # how a generated multi-part question joins its parts; figures per form
    # What a table question asks of its table; figures per kind (kb_eval/table_figures.py).
    table: Literal["cell", "extreme", "count", "comparison"] | None = None
    answers: list[str] | None = None  # every value a tie's answer must state


def load_questions(path: Path, *, need_expected: bool = True) -> list[EvalQuestion]:
    """The questions of a JSONL eval file, in file order; blank lines are skipped.

    Raises ValueError naming the file and line for a line that is not a JSON object with a
    non-empty "question", has a field of the wrong type, or (with `need_expected`, as for
    evaluation) is answerable without an expected_source. A line with "parts" needs two or
    more, each with a non-empty question and (with `need_expected`) an expected_source when
    answerable, and no top-level expected_source or answer.
    """
    questions: list[EvalQuestion] = []
    # utf-8-sig: files saved by Windows editors often start with a BOM.
    with open(path, encoding="utf-8-sig") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            questions.append(_parse_line(line, f"{path}, line {number}", need_expected))
    return questions


def load_question_sets(paths: Iterable[Path]) -> list[EvalQuestion]:
    """The questions of several eval files, one after the other (KB_EVAL_SETS)."""
    questions = [q for path in paths for q in load_questions(path)]
    if not questions:
        raise ValueError("the question sets hold no question")
    return questions


def _parse_line(line: str, where: str, need_expected: bool) -> EvalQuestion:
    try:
        question = msgspec.json.decode(line, type=EvalQuestion)
    except msgspec.DecodeError as err:  # also msgspec.ValidationError, its subclass
        raise ValueError(f"{where}: {err}") from err
    if not question.question.strip():
        raise ValueError(f"{where}: \"question\" is empty")
    if question.miss is not None and question.answerable:
        raise ValueError(f"{where}: \"miss\" describes an unanswerable question; this one is "
                         "answerable")
    if question.parts is not None:
        # The parts are scored, not the whole: a top-level source or span would be read by the
        # single-question scoring and score the line as if it had one part.
        if question.expected_source is not None or question.answer is not None:
            raise ValueError(f"{where}: a question with \"parts\" gives expected_source and "
                             "answer in each part, not at the top level")
        _check_parts(question.parts, where, need_expected)
    elif need_expected and question.answerable and not question.expected_source:
        raise ValueError(f"{where}: an answerable question needs \"expected_source\"")
    return question


def _check_parts(parts: list[EvalPart], where: str, need_expected: bool) -> None:
    if len(parts) < 2:
        raise ValueError(f"{where}: \"parts\" needs at least 2 parts, not {len(parts)}")
    for number, part in enumerate(parts, start=1):
        if not part.question.strip():
            raise ValueError(f"{where}: part {number}: \"question\" is empty")
        if need_expected and part.answerable and not part.expected_source:
            raise ValueError(f"{where}: part {number}: an answerable part needs "
                             "\"expected_source\"")


def source_matches(source_uri: str, expected: str) -> bool:
    """Whether a hit's source_uri is the expected document.

    True when they are equal or source_uri ends with expected at a path boundary, so
    "hr/就業規則.md" matches "/x/docs/hr/就業規則.md" but "就業規則.md" does not match
    "/x/docs/hr/旧就業規則.md". Both are NFC-normalized first: some file systems (macOS,
    shares mounted from it) hand out NFD names, where ガ is カ plus a combining mark.
    """
    source = unicodedata.normalize("NFC", source_uri)
    expected = unicodedata.normalize("NFC", expected)
    if not expected or not source.endswith(expected):
        return False
    prefix = source[: len(source) - len(expected)]
    return not prefix or prefix.endswith("/") or expected.startswith("/")


def is_relevant(question: EvalQuestion, source_uri: str, content: str | None) -> bool:
    """Whether a hit answers `question`: it is from the expected document and, when the
    question gives its answer and the hit's `content` is known, contains it."""
    return source_matches(source_uri, question.expected_source or "") and (
        question.answer is None or content is None or holds_answer(content, question.answer))


def holds_answer(text: str, answer: str) -> bool:
    """Whether `text` contains the gold `answer`, NFKC-normalized, white space removed."""
    return squeezed(answer) in squeezed(text)


def squeezed(text: str) -> str:
    """`text` as the answer checks compare it: NFKC-normalized, white space removed."""
    return "".join(unicodedata.normalize("NFKC", text).split())
