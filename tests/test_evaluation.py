"""Retrieval metrics of `kb eval`: hand-computed values, matching rules, the loader, properties."""

from __future__ import annotations

import json
import math
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kb_core.evaluation import (
    EvalQuestion,
    compare_modes,
    evaluate,
    load_questions,
    source_matches,
)

REPO = Path(__file__).resolve().parent.parent
DOCS = "/kb/docs"


def ask(expected: str | None, answerable: bool = True) -> EvalQuestion:
    return EvalQuestion(question=f"{expected}について", expected_source=expected,
                        answerable=answerable)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- metrics with known values ---------------------------------------------------------------

def test_ranks_one_three_and_absent_give_hand_computed_metrics() -> None:
    questions = [ask("hr/就業規則.md"), ask("hr/給与規程.md"), ask("all/経費精算規程.docx")]
    hits = [
        [f"{DOCS}/hr/就業規則.md", f"{DOCS}/hr/給与規程.md", f"{DOCS}/all/FAQ.txt"],
        [f"{DOCS}/all/FAQ.txt", f"{DOCS}/hr/就業規則.md", f"{DOCS}/hr/給与規程.md"],
        [f"{DOCS}/hr/就業規則.md", f"{DOCS}/all/FAQ.txt", f"{DOCS}/hr/給与規程.md"],
    ]
    result = evaluate(questions, hits, k=5)
    assert result["n"] == 3
    assert result["k"] == 5
    assert result["recall"] == {"1": 0.3333, "5": 0.6667, "10": 0.6667}
    assert result["recall_at_k"] == 0.6667
    assert result["mrr_at_10"] == round((1 + 1 / 3 + 0) / 3, 4) == 0.4444
    # rank 1 → 1/log2(2) = 1, rank 3 → 1/log2(4) = 0.5, absent → 0
    assert result["ndcg_at_10"] == 0.5
    assert result["misses"] == [{
        "question": "all/経費精算規程.docxについて",
        "expected_source": "all/経費精算規程.docx",
        "top": [f"{DOCS}/hr/就業規則.md", f"{DOCS}/all/FAQ.txt", f"{DOCS}/hr/給与規程.md"],
    }]


def test_ndcg_at_rank_two_is_one_over_log2_of_three() -> None:
    result = evaluate([ask("a.md")], [[f"{DOCS}/b.md", f"{DOCS}/a.md"]], k=1)
    assert result["ndcg_at_10"] == round(1 / math.log2(3), 4) == 0.6309
    assert result["mrr_at_10"] == 0.5
    assert result["recall"] == {"1": 0.0, "5": 1.0, "10": 1.0}


def test_document_beyond_rank_ten_scores_zero_for_mrr_and_ndcg() -> None:
    hits = [f"{DOCS}/other{i}.md" for i in range(10)] + [f"{DOCS}/a.md"]
    result = evaluate([ask("a.md")], [hits], k=20)
    assert result["recall_at_k"] == 1.0
    assert result["recall"]["10"] == 0.0
    assert result["mrr_at_10"] == 0.0
    assert result["ndcg_at_10"] == 0.0


def test_misses_list_the_questions_outside_the_top_k() -> None:
    questions = [ask("a.md"), ask("b.md")]
    hits = [[f"{DOCS}/a.md"], [f"{DOCS}/x.md", f"{DOCS}/b.md"]]
    assert evaluate(questions, hits, k=2)["misses"] == []
    misses = evaluate(questions, hits, k=1)["misses"]
    assert [m["expected_source"] for m in misses] == ["b.md"]


# --- chunks versus documents -----------------------------------------------------------------

def test_duplicate_chunks_of_one_document_count_once_at_its_first_rank() -> None:
    hits = [[f"{DOCS}/x.md", f"{DOCS}/a.md", f"{DOCS}/a.md", f"{DOCS}/a.md"]]
    result = evaluate([ask("a.md")], hits, k=5)
    assert result["mrr_at_10"] == 0.5
    assert result["ndcg_at_10"] == round(1 / math.log2(3), 4)  # not a sum over three chunks
    assert result["recall"] == {"1": 0.0, "5": 1.0, "10": 1.0}


def test_a_document_ranks_at_the_position_of_its_first_chunk_among_the_hits() -> None:
    hits = [[f"{DOCS}/x.md", f"{DOCS}/x.md", f"{DOCS}/a.md"]]
    result = evaluate([ask("a.md")], hits, k=2)
    assert result["recall_at_k"] == 0.0
    assert result["mrr_at_10"] == 0.3333


def test_miss_shows_the_first_three_distinct_sources() -> None:
    hits = [[f"{DOCS}/x.md", f"{DOCS}/x.md", f"{DOCS}/y.md", f"{DOCS}/y.md", f"{DOCS}/z.md",
             f"{DOCS}/w.md"]]
    (miss,) = evaluate([ask("a.md")], hits, k=5)["misses"]
    assert miss["top"] == [f"{DOCS}/x.md", f"{DOCS}/y.md", f"{DOCS}/z.md"]


# --- which questions count -------------------------------------------------------------------

def test_unanswerable_questions_are_excluded_from_the_metrics() -> None:
    questions = [ask("a.md"), ask(None, answerable=False), ask("b.md", answerable=False)]
    hits = [[f"{DOCS}/a.md"], [f"{DOCS}/a.md"], [f"{DOCS}/x.md"]]
    result = evaluate(questions, hits, k=1)
    assert result["n"] == 1
    assert result["recall_at_k"] == result["mrr_at_10"] == result["ndcg_at_10"] == 1.0
    assert result["misses"] == []


def test_answerable_question_without_expected_source_is_not_counted() -> None:
    result = evaluate([ask(None), ask("a.md")], [[], [f"{DOCS}/a.md"]], k=1)
    assert result["n"] == 1
    assert result["recall_at_k"] == 1.0


def test_no_countable_questions_give_zero_metrics() -> None:
    result = evaluate([ask(None, answerable=False)], [[f"{DOCS}/a.md"]], k=5)
    assert result == {"n": 0, "k": 5, "recall_at_k": 0.0,
                      "recall": {"1": 0.0, "5": 0.0, "10": 0.0},
                      "mrr_at_10": 0.0, "ndcg_at_10": 0.0, "misses": []}


def test_hit_lists_must_align_with_questions() -> None:
    with pytest.raises(ValueError, match="2 questions but 1 hit lists"):
        evaluate([ask("a.md"), ask("b.md")], [[]], k=5)


def test_k_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="k must be at least 1"):
        evaluate([ask("a.md")], [[]], k=0)


# --- matching a hit to the expected document -------------------------------------------------

@pytest.mark.parametrize("expected", [
    "/x/docs/hr/就業規則.md", "docs/hr/就業規則.md", "hr/就業規則.md", "就業規則.md",
    "/hr/就業規則.md",
])
def test_source_matches_at_a_path_boundary(expected: str) -> None:
    assert source_matches("/x/docs/hr/就業規則.md", expected)


@pytest.mark.parametrize("expected", [
    "就業規則.md", "hr/就業規則.md", "規則.md", "r/旧就業規則.md", "hr/旧就業規則", "",
])
def test_source_does_not_match_inside_a_file_or_folder_name(expected: str) -> None:
    assert not source_matches("/x/docs/hr/旧就業規則.md", expected)


def test_source_does_not_match_a_different_folder() -> None:
    assert not source_matches("/x/docs/all/就業規則.md", "hr/就業規則.md")
    assert not source_matches("/x/docs/xhr/就業規則.md", "hr/就業規則.md")


def test_source_matches_nfd_file_names_against_nfc_expected() -> None:
    name = "hr/人事評価制度運用ガイド.md"
    nfd = unicodedata.normalize("NFD", f"/x/docs/{name}")
    assert nfd != f"/x/docs/{name}"  # ガ decomposes into カ + U+3099
    assert source_matches(nfd, name)
    assert source_matches(f"/x/docs/{name}", unicodedata.normalize("NFD", name))
    assert not source_matches(unicodedata.normalize("NFD", "/x/docs/hr/旧ガイド.md"), "ガイド.md")


def test_evaluate_finds_nfd_hits() -> None:
    hits = [[unicodedata.normalize("NFD", f"{DOCS}/all/ITヘルプデスクFAQ.txt")]]
    assert evaluate([ask("all/ITヘルプデスクFAQ.txt")], hits, k=1)["recall_at_k"] == 1.0


# --- loading eval files ----------------------------------------------------------------------

def test_loader_reads_all_fields_and_skips_blank_lines(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "eval.jsonl", [
        json.dumps({"question": "有給は？", "expected_source": "hr/就業規則.md",
                    "groups": ["all-employees"]}, ensure_ascii=False),
        "",
        "   ",
        json.dumps({"question": "食堂は？", "answerable": False, "note": "資料なし"},
                   ensure_ascii=False),
    ])
    assert load_questions(path) == [
        EvalQuestion("有給は？", "hr/就業規則.md", groups=["all-employees"]),
        EvalQuestion("食堂は？", answerable=False, note="資料なし"),
    ]


def test_loader_accepts_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text('\ufeff{"question": "q", "expected_source": "a.md"}\n', encoding="utf-8")
    assert load_questions(path) == [EvalQuestion("q", "a.md")]


@pytest.mark.parametrize("bad_line", [
    '{"question": "q", "expected_source": ',
    "not json",
    '{"expected_source": "a.md"}',
    '["question", "a.md"]',
    '{"question": 3, "expected_source": "a.md"}',
    '{"question": "  ", "expected_source": "a.md"}',
    '{"question": "q", "answerable": "no"}',
    '{"question": "q"}',
    '{"question": "q", "answerable": true, "expected_source": ""}',
])
def test_loader_error_names_the_line(tmp_path: Path, bad_line: str) -> None:
    good = '{"question": "q", "expected_source": "a.md"}'
    path = write_lines(tmp_path / "eval.jsonl", [good, "", bad_line, good])
    with pytest.raises(ValueError, match=r"eval\.jsonl, line 3: "):
        load_questions(path)


def test_loader_error_for_missing_question_says_so(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "eval.jsonl", ['{"expected_source": "a.md"}'])
    with pytest.raises(ValueError, match="line 1: .*question"):
        load_questions(path)


def test_loader_error_for_answerable_without_source_says_so(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "eval.jsonl", ['{"question": "q"}'])
    with pytest.raises(ValueError, match="line 1: .*expected_source"):
        load_questions(path)


def test_sample_eval_file_loads_and_names_existing_documents() -> None:
    questions = load_questions(REPO / "samples" / "eval.jsonl")
    docs = REPO / "samples" / "docs"
    files = [str(p) for p in docs.rglob("*") if p.is_file()]
    expected = {q.expected_source for q in questions if q.expected_source}
    assert any(q.answerable for q in questions)
    assert any(not q.answerable for q in questions)
    for source in expected:
        assert (docs / source).is_file(), source
        assert [f for f in files if source_matches(f, source)] == [str(docs / source)], source


# --- the side-by-side table ------------------------------------------------------------------

def test_compare_modes_prints_one_row_per_mode_in_fixed_order() -> None:
    questions = [ask("a.md"), ask("b.md"), ask("c.md")]
    good = [[f"{DOCS}/a.md"], [f"{DOCS}/x.md", f"{DOCS}/x.md", f"{DOCS}/b.md"], []]
    bad = [[], [], []]
    table = compare_modes({"keyword": evaluate(questions, bad, k=5),
                           "hybrid": evaluate(questions, good, k=5),
                           "vector": evaluate(questions, good, k=5)})
    header, *rows = table.splitlines()
    assert header.split() == ["mode", "R@1", "R@5", "R@10", "MRR@10", "nDCG@10"]
    assert [row.split()[0] for row in rows] == ["hybrid", "vector", "keyword"]
    assert rows[0].split()[1:] == ["0.3333", "0.6667", "0.6667", "0.4444", "0.5000"]
    assert rows[2].split()[1:] == ["0.0000"] * 5
    assert len({len(line) for line in table.splitlines()}) == 1  # columns line up


# --- properties ------------------------------------------------------------------------------

SOURCES = ["a.md", "b.md", "hr/c.md", "hr/旧c.md", "all/ガイド.md"]

questions_and_hits = st.lists(
    st.tuples(
        st.sampled_from(SOURCES),
        st.booleans(),
        st.lists(st.sampled_from(SOURCES).map(lambda s: f"{DOCS}/{s}"), max_size=15),
    ),
    max_size=12,
)


def run(cases: list[tuple[str, bool, list[str]]], k: int) -> dict:
    questions = [ask(source, answerable) for source, answerable, _ in cases]
    return evaluate(questions, [hits for _, _, hits in cases], k)


@given(questions_and_hits, st.integers(min_value=1, max_value=20))
def test_recall_grows_with_the_cutoff(cases: list, k: int) -> None:
    recall = run(cases, k)["recall"]
    assert recall["1"] <= recall["5"] <= recall["10"]


@given(questions_and_hits, st.integers(min_value=1, max_value=20))
def test_all_metrics_lie_between_zero_and_one(cases: list, k: int) -> None:
    result = run(cases, k)
    values = [result["recall_at_k"], *result["recall"].values(), result["mrr_at_10"],
              result["ndcg_at_10"]]
    assert all(0.0 <= value <= 1.0 for value in values)


@given(questions_and_hits, st.integers(min_value=1, max_value=20))
def test_mrr_is_at_least_recall_at_one_and_ndcg_at_least_mrr(cases: list, k: int) -> None:
    result = run(cases, k)
    assert result["recall"]["1"] <= result["mrr_at_10"] <= result["ndcg_at_10"]
    assert result["ndcg_at_10"] <= result["recall"]["10"]


@given(questions_and_hits, st.integers(min_value=1, max_value=20))
def test_misses_and_n_agree_with_recall_at_k(cases: list, k: int) -> None:
    result = run(cases, k)
    assert result["n"] == sum(answerable for _, answerable, _ in cases)
    if result["n"]:
        found = (result["n"] - len(result["misses"])) / result["n"]
        assert result["recall_at_k"] == round(found, 4)
    if k in (1, 5, 10):
        assert result["recall_at_k"] == result["recall"][str(k)]
