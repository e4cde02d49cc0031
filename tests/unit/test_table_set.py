"""The table development set's generator (kb_eval.table_set): the same seed writes byte-identical
files, every gold answer is what the files show, and counts, extremes and comparisons hold when
recomputed here from the data."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import openpyxl
import pytest

from kb_eval.question_sets import load_questions
from kb_eval.table_set import DrawnQuestion, TableSet, main, table_set

SEED = 7
REPO = Path(__file__).resolve().parents[2]
BOM = b"\xef\xbb\xbf"
# How a spreadsheet shows a number under each format the set uses, written apart from the
# generator's own `shown`.
SHOWN: dict[str, Callable[[float], str]] = {
    "General": str,
    "#,##0": "{:,}".format,
    "0.0": "{:.1f}".format,
    "0%": "{:.0%}".format,
    '"¥"#,##0': "¥{:,}".format,
}
HOLDS: dict[str, Callable[[float, float], bool]] = {
    "=": lambda value, threshold: value == threshold,
    ">=": lambda value, threshold: value >= threshold,
    "<=": lambda value, threshold: value <= threshold,
    "<": lambda value, threshold: value < threshold,
}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tables")
    assert main([str(out), "--seed", str(SEED)]) == 0
    return out


@pytest.fixture(scope="module")
def drawn() -> TableSet:
    return table_set(SEED)


def lines_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "eval.jsonl").read_text("utf-8").splitlines()]


def file_rows(path: Path) -> dict[str, list[list[str]]]:
    """Sheet (or "" for a CSV file) → its non-empty rows, each the cells as shown."""
    data = path.read_bytes()
    if path.suffix == ".csv":
        text = data[len(BOM):].decode("utf-8") if data.startswith(BOM) else data.decode("cp932")
        return {"": [row for row in csv.reader(io.StringIO(text)) if row]}
    workbook = openpyxl.load_workbook(path)
    sheets = {}
    for sheet in workbook.worksheets:
        rows = [[c.value if isinstance(c.value, str) else SHOWN[c.number_format](c.value)
                 for c in row if c.value is not None] for row in sheet.iter_rows()]
        sheets[sheet.title] = [row for row in rows if row]
    return sheets


def all_rows(out: Path) -> dict[str, list[list[str]]]:
    """File name → every row of every sheet."""
    return {path.name: [row for rows in file_rows(path).values() for row in rows]
            for path in sorted((out / "docs").iterdir())}


def test_the_same_seed_writes_byte_identical_files(written: Path, tmp_path: Path) -> None:
    # Another process with another hash seed: an order taken from a set would show here.
    subprocess.run([sys.executable, "-m", "kb_eval.table_set", str(tmp_path / "again"),
                    "--seed", str(SEED)], cwd=REPO, check=True, capture_output=True,
                   env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert main([str(tmp_path / "other"), "--seed", str(SEED + 1)]) == 0
    names = sorted(p.name for p in (written / "docs").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "again" / "docs").iterdir())
    for name in names:
        assert (tmp_path / "again" / "docs" / name).read_bytes() == \
            (written / "docs" / name).read_bytes(), name
    assert (tmp_path / "again" / "eval.jsonl").read_bytes() == \
        (written / "eval.jsonl").read_bytes()
    assert (tmp_path / "other" / "eval.jsonl").read_bytes() != \
        (written / "eval.jsonl").read_bytes()


def test_workbooks_carry_no_date_of_the_clock(written: Path) -> None:
    for path in (written / "docs").glob("*.xlsx"):
        with zipfile.ZipFile(path) as archive:
            assert {entry.date_time for entry in archive.infolist()} == {(2026, 10, 1, 9, 0, 0)}
            core = archive.read("docProps/core.xml").decode()
        assert core.count("2026-10-01T09:00:00Z") == 2, path.name


def test_the_lines_have_the_documented_keys_and_load_as_questions(written: Path) -> None:
    for line in lines_of(written):
        if line.get("answerable", True):
            assert set(line) - {"answers", "tie"} == {"question", "expected_source", "answer",
                                                      "table"}
            assert line["table"] in {"cell", "extreme", "count", "comparison"}
        else:
            assert set(line) == {"question", "answerable", "miss", "table", "note"}
            assert line["miss"] == "near" and line["table"] == "cell"
    assert len(load_questions(written / "eval.jsonl")) == len(lines_of(written))


def test_each_kind_has_enough_questions_and_no_question_repeats(written: Path) -> None:
    lines = lines_of(written)
    kinds = Counter("near" if line.get("miss") else line["table"] for line in lines)
    assert kinds["near"] >= 10
    assert all(kinds[kind] >= 20 for kind in ("cell", "extreme", "count", "comparison")), kinds
    assert len({line["question"] for line in lines}) == len(lines)
    sources = {line["expected_source"] for line in lines if "expected_source" in line}
    assert sources == {p.name for p in (written / "docs").iterdir()}


def test_the_written_lines_are_the_drawn_questions(written: Path, drawn: TableSet) -> None:
    assert [line["question"] for line in lines_of(written)] == \
        [q.line.question for q in drawn.questions]


def test_every_cell_answer_is_shown_in_the_row_its_question_names(written: Path) -> None:
    rows = all_rows(written)
    for line in lines_of(written):
        if line["table"] != "cell" or "answer" not in line:
            continue
        named = [row for row in rows[line["expected_source"]] if row[0] in line["question"]]
        assert named, line
        assert any(line["answer"] in row[1:] for row in named), line


def test_every_data_row_is_in_its_file_and_a_total_row_only_where_declared(
        written: Path, drawn: TableSet) -> None:
    for table in drawn.tables:
        rows = file_rows(written / "docs" / table.source)[table.sheet or ""]
        by_key = {row[0]: row for row in rows}
        for key, cells in table.rows:
            shown = [cell if isinstance(cell, str) else SHOWN[column.number_format](cell)
                     for cell, column in zip(cells, table.columns, strict=True)]
            assert by_key[key] == [key, *shown]
        assert ("合計" in by_key) == bool(table.total), table.title


def answer_of(question: DrawnQuestion) -> tuple[str, list[str]]:
    """The gold answer and every tied key, recomputed from the table's rows."""
    table, column = question.table, question.column
    assert column is not None
    # A matrix repeats headers (B地域 under 日当 and under 宿泊費); a question's name does not.
    names = [c.name for c in table.columns]
    assert len(set(names)) == len(names)
    at = names.index(column.name)
    values = {key: cells[at] for key, cells in table.rows}
    if question.line.table == "count":
        return str(sum(HOLDS[question.op](v, question.threshold) for v in values.values())), []
    pool = {key: values[key] for key in question.keys} if question.keys else values
    best = (max if question.op == "max" else min)(pool.values())
    winners = [key for key, value in pool.items() if value == best]
    return winners[0], winners


def test_extremes_counts_and_comparisons_hold_when_recomputed(drawn: TableSet) -> None:
    for question in drawn.questions:
        line = question.line
        if line.table == "cell" or not line.answerable:
            continue
        if line.table == "count" and question.column is None:
            assert line.answer == str(len(question.table.rows))
            continue
        answer, tied = answer_of(question)
        assert line.answer == answer, line
        assert question.column is not None and question.column.name in line.question
        if line.table == "extreme":
            assert line.tie == (len(tied) > 1) and line.answers == (tied if line.tie else None)
        if line.table == "comparison":
            assert len(tied) == 1 and all(key in line.question for key in question.keys)


def test_count_conditions_are_worded_as_they_compare(drawn: TableSet) -> None:
    words = {">=": "以上", "<=": "以下", "<": "未満"}
    ops = Counter(q.op for q in drawn.questions if q.line.table == "count")
    assert {"", "="} <= set(ops) and set(words) & set(ops)
    for question in drawn.questions:
        if question.line.table == "count" and question.op in words:
            assert words[question.op] in question.line.question


def test_ties_name_every_tied_key_and_answer_the_first(written: Path) -> None:
    ties = [line for line in lines_of(written) if line.get("tie")]
    assert ties
    for line in ties:
        assert line["table"] == "extreme" and len(line["answers"]) >= 2
        assert line["answer"] == line["answers"][0]


def test_near_misses_ask_for_a_key_or_a_column_no_table_holds(
        written: Path, drawn: TableSet) -> None:
    text = "\n".join(cell for rows in all_rows(written).values() for row in rows for cell in row)
    misses = [q for q in drawn.questions if not q.line.answerable]
    assert len(misses) >= 10
    for question in misses:
        (key,) = question.keys
        assert question.column is not None and key in question.line.question
        table_keys = {k for k, _ in question.table.rows}
        if key not in table_keys:
            assert key not in text
            continue
        names = {c.name for c in question.table.columns}
        assert question.column.name not in names
        assert any(question.column.name in {c.name for c in t.columns} for t in drawn.tables)


def test_the_shapes_a_table_reader_must_cope_with_are_all_written(written: Path) -> None:
    docs = written / "docs"
    formats = set()
    for path in docs.glob("*.xlsx"):
        for sheet in openpyxl.load_workbook(path).worksheets:
            formats |= {c.number_format for row in sheet.iter_rows() for c in row
                        if isinstance(c.value, int | float)}
    assert {"#,##0", "0.0", "0%", '"¥"#,##0'} <= formats
    allowances = openpyxl.load_workbook(docs / "出張手当表.xlsx").active
    assert {str(r) for r in allowances.merged_cells.ranges} >= {"B3:D3", "E3:G3"}
    stock = openpyxl.load_workbook(docs / "拠点別在庫一覧.xlsx").active
    assert all(cell.value is None for cell in stock["A"])
    assert len(openpyxl.load_workbook(docs / "製品スペック一覧.xlsx").worksheets) == 2
    rows = all_rows(written)
    firsts = {row[0] for table in rows.values() for row in table}
    assert any(first.startswith("注1") for first in firsts)
    assert any(first.startswith("※") for first in firsts)
    assert {"単位：円", "（単位：円）"} <= firsts and "合計" in firsts
    csv_files = {path.name: path.read_bytes() for path in docs.glob("*.csv")}
    assert any(data.startswith(BOM) for data in csv_files.values())
    cp932 = [data for data in csv_files.values() if not data.startswith(BOM)]
    assert cp932
    with pytest.raises(UnicodeDecodeError):
        cp932[0].decode("utf-8")
