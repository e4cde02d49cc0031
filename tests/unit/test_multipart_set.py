"""The JaQuAD multi-part set's generator (kb_eval.multipart_set): pairs about different
documents, the four joins in equal shares, and a byte-identical file for the same seed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kb_eval.multipart_set import FORMS, join_questions, main
from kb_eval.question_sets import load_questions


def small_set(path: Path) -> Path:
    lines = [{"question": f"記事{doc}の問{n}は何か?", "expected_source": f"j{doc:03d}.md",
              "answer": f"答{doc}-{n}", "question_type": "Syntactic variation"}
             for doc in range(1, 5) for n in range(1, 4)]
    lines.append({"question": "載っていない記事の問は何か?", "answerable": False})
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines),
                    encoding="utf-8")
    return path


def generate(source: Path, out: Path, pairs: int = 20, seed: int = 43) -> Path:
    assert main([str(source), "--pairs", str(pairs), "--seed", str(seed), "--out", str(out)]) == 0
    return out


def test_pairs_join_two_answerable_questions_about_different_documents(tmp_path: Path) -> None:
    out = generate(small_set(tmp_path / "eval.jsonl"), tmp_path / "multi.jsonl")
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 20
    keys = set()
    for line in lines:
        first, second = line["parts"]
        assert set(line) == {"question", "parts", "form"}
        assert first["expected_source"] != second["expected_source"]
        assert first["answer"].startswith("答") and second["answer"].startswith("答")
        assert "載っていない" not in line["question"]
        assert line["question"] == join_questions(first["question"], second["question"],
                                                  line["form"])
        keys.add(frozenset((first["question"], second["question"])))
    assert len(keys) == 20


def test_the_four_forms_come_in_equal_shares(tmp_path: Path) -> None:
    out = generate(small_set(tmp_path / "eval.jsonl"), tmp_path / "multi.jsonl")
    forms = Counter(json.loads(line)["form"] for line in out.read_text().splitlines())
    assert forms == {form: 5 for form in FORMS}


def test_the_same_seed_writes_a_byte_identical_file(tmp_path: Path) -> None:
    source = small_set(tmp_path / "eval.jsonl")
    first = generate(source, tmp_path / "a.jsonl").read_bytes()
    assert generate(source, tmp_path / "b.jsonl").read_bytes() == first
    assert generate(source, tmp_path / "c.jsonl", seed=44).read_bytes() != first


def test_the_written_set_loads_as_multipart_questions(tmp_path: Path) -> None:
    out = generate(small_set(tmp_path / "eval.jsonl"), tmp_path / "multi.jsonl")
    questions = load_questions(out)
    assert all(q.parts and len(q.parts) == 2 and q.groups is None for q in questions)


@pytest.mark.parametrize(("form", "joined"), [
    ("また", "1865年のことなの?また、誰か?"),
    ("と", "1865年のことなのと、誰か?"),
    ("comma", "1865年のことなの、誰か?"),
    ("none", "1865年のことなの誰か?"),
])
def test_each_form_joins_as_documented(form: str, joined: str) -> None:
    assert join_questions("1865年のことなの?", "誰か?", form) == joined


def test_a_question_ending_in_a_full_stop_loses_it_as_it_would_its_question_mark() -> None:
    assert join_questions("誰ですか。", "いつですか。", "と") == "誰ですかと、いつですか。"
    assert join_questions("誰ですか", "いつ?", "また") == "誰ですか？また、いつ?"


def test_more_pairs_than_the_set_holds_fail_with_a_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = small_set(tmp_path / "eval.jsonl")
    # 12 questions, 3 per document over 4 documents: 66 pairs less 4 × 3 within a document.
    assert main([str(source), "--pairs", "55", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "only 54 pairs" in capsys.readouterr().err
    assert main([str(source), "--pairs", "54", "--out", str(tmp_path / "x.jsonl")]) == 0
