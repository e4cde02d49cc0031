"""Multi-part eval lines (Deep mode): how the loader reads and refuses them, and the sample set's
gold answers checked against the text of its documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb_eval.question_sets import EvalPart, EvalQuestion, holds_answer, load_questions
from kb_pipeline.access import resolve_access
from kb_pipeline.parsing import parse_document

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "samples" / "docs"
SAMPLE = REPO / "samples" / "eval_multipart.jsonl"

PART_A = {"question": "育休の申出期限は？", "expected_source": "all/育児介護休業規程.md",
          "answer": "1か月前"}
PART_B = {"question": "介護休業の申出期限は？", "expected_source": "all/育児介護休業規程.md",
          "answer": "2週間前"}


def write_line(path: Path, line: dict | str) -> Path:
    text = line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def test_a_multipart_line_loads_its_parts(tmp_path: Path) -> None:
    path = write_line(tmp_path / "eval.jsonl", {
        "question": "育児休業と介護休業の申請期限は？", "parts": [PART_A, PART_B],
        "groups": ["all-employees"], "note": "comparison"})
    assert load_questions(path) == [EvalQuestion(
        "育児休業と介護休業の申請期限は？", groups=["all-employees"], note="comparison",
        parts=[EvalPart("育休の申出期限は？", "all/育児介護休業規程.md", "1か月前"),
               EvalPart("介護休業の申出期限は？", "all/育児介護休業規程.md", "2週間前")])]


def test_a_part_no_readable_document_answers_needs_no_source(tmp_path: Path) -> None:
    hidden = {"question": "課長の役職手当は？", "answerable": False}
    path = write_line(tmp_path / "eval.jsonl", {"question": "q", "parts": [PART_A, hidden]})
    [question] = load_questions(path)
    assert question.parts is not None
    assert question.parts[1] == EvalPart("課長の役職手当は？", answerable=False)


def test_single_questions_still_load_without_parts(tmp_path: Path) -> None:
    path = write_line(tmp_path / "eval.jsonl", {"question": "q", "expected_source": "a.md"})
    assert load_questions(path) == [EvalQuestion("q", "a.md")]


@pytest.mark.parametrize(("line", "message"), [
    ({"question": "q", "parts": [PART_A]}, "at least 2 parts, not 1"),
    ({"question": "q", "parts": []}, "at least 2 parts, not 0"),
    ({"question": "q", "parts": [PART_A, PART_B], "expected_source": "a.md"}, "top level"),
    ({"question": "q", "parts": [PART_A, PART_B], "answer": "1か月前"}, "top level"),
    ({"question": "q", "parts": [PART_A, {"question": "介護休業は？"}]},
     "part 2: an answerable part needs \"expected_source\""),
    ({"question": "q", "parts": [PART_A, {**PART_B, "expected_source": ""}]},
     "part 2: an answerable part needs"),
    ({"question": "q", "parts": [{**PART_A, "question": " "}, PART_B]},
     "part 1: \"question\" is empty"),
    ({"question": "q", "parts": [PART_A, {"expected_source": "a.md"}]}, "question"),
    ({"question": "q", "parts": [PART_A, "介護休業は？"]}, "parts"),
])
def test_a_malformed_multipart_line_is_refused_naming_file_and_line(
        tmp_path: Path, line: dict, message: str) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text('{"question": "q", "expected_source": "a.md"}\n\n'
                    + json.dumps(line, ensure_ascii=False) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"eval\.jsonl, line 3: ") as raised:
        load_questions(path)
    assert message in str(raised.value)


def test_question_lists_need_no_sources_in_parts(tmp_path: Path) -> None:
    path = write_line(tmp_path / "eval.jsonl", {
        "question": "q", "parts": [{"question": "a"}, {"question": "b"}]})
    [question] = load_questions(path, need_expected=False)
    assert question.parts == [EvalPart("a"), EvalPart("b")]


def test_the_sample_multipart_set_has_every_kind_of_question() -> None:
    kinds = [q.note.split(":")[0] for q in load_questions(SAMPLE) if q.note]
    assert kinds.count("comparison") >= 8
    assert kinds.count("each") >= 6
    assert kinds.count("two-questions") >= 6
    assert kinds.count("outside-groups") >= 2


def test_each_sample_part_is_answered_by_a_document_its_caller_may_read() -> None:
    texts: dict[str, str] = {}
    for question in load_questions(SAMPLE):
        assert question.parts and question.groups, question.question
        for part in question.parts:
            if not part.answerable:
                continue
            assert part.expected_source and part.answer, part.question
            file = DOCS / part.expected_source
            if part.expected_source not in texts:
                parsed = parse_document(file.name, file.read_bytes())
                texts[part.expected_source] = "\n".join(b.text for b in parsed.blocks)
            assert holds_answer(texts[part.expected_source], part.answer), part.question
            readers = resolve_access(file, DOCS).groups
            assert set(readers) & set(question.groups), part.question
