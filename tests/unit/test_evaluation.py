"""Metrics of `kb eval` and the evaluation asset: hand-computed retrieval values, hand-made
answers (wrong citation, hallucinated number, missed "not found", forbidden group), matching
rules, the loaders and settings, properties."""

from __future__ import annotations

import json
import math
import time
import unicodedata
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kb_core.settings import REPO_ROOT as SETTINGS_ROOT
from kb_core.settings import Settings
from kb_eval.answers import (
    AnswerMetrics,
    NotFoundByMiss,
    evaluate_answers,
    numbered_in_order,
    numbers_match,
    quotes_hold,
)
from kb_eval.question_sets import (
    EvalQuestion,
    holds_answer,
    load_question_sets,
    load_questions,
    source_matches,
)
from kb_eval.refusals import refusal_curve
from kb_eval.report.plain_text import compare_modes
from kb_eval.retrieval import Miss, ModeMetrics, Recall, evaluate, recall_curve
from kb_search.answerers import NOT_FOUND, Passage
from kb_search.answerers.answer import answer_from_text
from kb_search.grounded_answers import AskResult, GroundedAnswers, PreparedAnswer
from kb_search.passage_reference import reference
from kb_search.search import Ranks, SearchHit, SearchResult

REPO = Path(__file__).resolve().parents[2]
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
    assert result.n == 3
    assert result.k == 5
    assert result.recall == Recall(at_1=0.3333, at_5=0.6667, at_10=0.6667)
    assert result.recall_at_k == 0.6667
    assert result.mrr_at_10 == round((1 + 1 / 3 + 0) / 3, 4) == 0.4444
    # rank 1 → 1/log2(2) = 1, rank 3 → 1/log2(4) = 0.5, absent → 0
    assert result.ndcg_at_10 == 0.5
    assert result.misses == [Miss(
        question="all/経費精算規程.docxについて",
        expected_source="all/経費精算規程.docx",
        top=[f"{DOCS}/hr/就業規則.md", f"{DOCS}/all/FAQ.txt", f"{DOCS}/hr/給与規程.md"],
    )]


def test_ndcg_at_rank_two_is_one_over_log2_of_three() -> None:
    result = evaluate([ask("a.md")], [[f"{DOCS}/b.md", f"{DOCS}/a.md"]], k=1)
    assert result.ndcg_at_10 == round(1 / math.log2(3), 4) == 0.6309
    assert result.mrr_at_10 == 0.5
    assert result.recall == Recall(at_1=0.0, at_5=1.0, at_10=1.0)


def test_document_beyond_rank_ten_scores_zero_for_mrr_and_ndcg() -> None:
    hits = [f"{DOCS}/other{i}.md" for i in range(10)] + [f"{DOCS}/a.md"]
    result = evaluate([ask("a.md")], [hits], k=20)
    assert result.recall_at_k == 1.0
    assert result.recall.at_10 == 0.0
    assert result.mrr_at_10 == 0.0
    assert result.ndcg_at_10 == 0.0


def test_misses_list_the_questions_outside_the_top_k() -> None:
    questions = [ask("a.md"), ask("b.md")]
    hits = [[f"{DOCS}/a.md"], [f"{DOCS}/x.md", f"{DOCS}/b.md"]]
    assert evaluate(questions, hits, k=2).misses == []
    misses = evaluate(questions, hits, k=1).misses
    assert [m.expected_source for m in misses] == ["b.md"]


# --- chunks versus documents -----------------------------------------------------------------

def test_duplicate_chunks_of_one_document_count_once_at_its_first_rank() -> None:
    hits = [[f"{DOCS}/x.md", f"{DOCS}/a.md", f"{DOCS}/a.md", f"{DOCS}/a.md"]]
    result = evaluate([ask("a.md")], hits, k=5)
    assert result.mrr_at_10 == 0.5
    assert result.ndcg_at_10 == round(1 / math.log2(3), 4)  # not a sum over three chunks
    assert result.recall == Recall(at_1=0.0, at_5=1.0, at_10=1.0)


def test_a_document_ranks_at_the_position_of_its_first_chunk_among_the_hits() -> None:
    hits = [[f"{DOCS}/x.md", f"{DOCS}/x.md", f"{DOCS}/a.md"]]
    result = evaluate([ask("a.md")], hits, k=2)
    assert result.recall_at_k == 0.0
    assert result.mrr_at_10 == 0.3333


def test_miss_shows_the_first_three_distinct_sources() -> None:
    hits = [[f"{DOCS}/x.md", f"{DOCS}/x.md", f"{DOCS}/y.md", f"{DOCS}/y.md", f"{DOCS}/z.md",
             f"{DOCS}/w.md"]]
    (miss,) = evaluate([ask("a.md")], hits, k=5).misses
    assert miss.top == [f"{DOCS}/x.md", f"{DOCS}/y.md", f"{DOCS}/z.md"]


# --- which questions count -------------------------------------------------------------------

def test_unanswerable_questions_are_excluded_from_the_metrics() -> None:
    questions = [ask("a.md"), ask(None, answerable=False), ask("b.md", answerable=False)]
    hits = [[f"{DOCS}/a.md"], [f"{DOCS}/a.md"], [f"{DOCS}/x.md"]]
    result = evaluate(questions, hits, k=1)
    assert result.n == 1
    assert result.recall_at_k == result.mrr_at_10 == result.ndcg_at_10 == 1.0
    assert result.misses == []


def test_answerable_question_without_expected_source_is_not_counted() -> None:
    result = evaluate([ask(None), ask("a.md")], [[], [f"{DOCS}/a.md"]], k=1)
    assert result.n == 1
    assert result.recall_at_k == 1.0


def test_no_countable_questions_give_zero_metrics() -> None:
    result = evaluate([ask(None, answerable=False)], [[f"{DOCS}/a.md"]], k=5)
    assert msgspec.to_builtins(result) == {"n": 0, "k": 5, "recall_at_k": 0.0,
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
    assert evaluate([ask("all/ITヘルプデスクFAQ.txt")], hits, k=1).recall_at_k == 1.0


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


def run(cases: list[tuple[str, bool, list[str]]], k: int) -> ModeMetrics:
    questions = [ask(source, answerable) for source, answerable, _ in cases]
    return evaluate(questions, [hits for _, _, hits in cases], k)


@given(questions_and_hits, st.integers(min_value=1, max_value=20))
def test_recall_grows_with_the_cutoff(cases: list, k: int) -> None:
    recall = run(cases, k).recall
    assert recall.at_1 <= recall.at_5 <= recall.at_10


@given(questions_and_hits, st.integers(min_value=1, max_value=20))
def test_all_metrics_lie_between_zero_and_one(cases: list, k: int) -> None:
    result = run(cases, k)
    values = [result.recall_at_k, result.recall.at_1, result.recall.at_5, result.recall.at_10,
              result.mrr_at_10, result.ndcg_at_10]
    assert all(0.0 <= value <= 1.0 for value in values)


@given(questions_and_hits, st.integers(min_value=1, max_value=20))
def test_mrr_is_at_least_recall_at_one_and_ndcg_at_least_mrr(cases: list, k: int) -> None:
    result = run(cases, k)
    assert result.recall.at_1 <= result.mrr_at_10 <= result.ndcg_at_10
    assert result.ndcg_at_10 <= result.recall.at_10


@given(questions_and_hits, st.integers(min_value=1, max_value=20))
def test_misses_and_n_agree_with_recall_at_k(cases: list, k: int) -> None:
    result = run(cases, k)
    assert result.n == sum(answerable for _, answerable, _ in cases)
    if result.n:
        found = (result.n - len(result.misses)) / result.n
        assert result.recall_at_k == round(found, 4)
    recall = result.recall
    if k in (1, 5, 10):
        assert result.recall_at_k == {1: recall.at_1, 5: recall.at_5, 10: recall.at_10}[k]


# --- recall curve, several question sets, settings -------------------------------------------

def test_recall_curve_steps_up_at_each_document_rank() -> None:
    questions = [ask("a.md"), ask("b.md"), ask("c.md", answerable=False)]
    hits = [[f"{DOCS}/a.md"], [f"{DOCS}/x.md", f"{DOCS}/y.md", f"{DOCS}/b.md"], []]
    curve = recall_curve(questions, hits)
    assert curve == [0.5, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    result = evaluate(questions, hits, k=5)
    assert [curve[0], curve[4], curve[9]] == [result.recall.at_1, result.recall.at_5,
                                              result.recall.at_10]


def test_question_sets_are_read_one_after_the_other(tmp_path: Path) -> None:
    first = write_lines(tmp_path / "a.jsonl", ['{"question": "q1", "expected_source": "a.md"}'])
    second = write_lines(tmp_path / "b.jsonl", ['{"question": "q2", "answerable": false}'])
    assert [q.question for q in load_question_sets([first, second])] == ["q1", "q2"]
    empty = write_lines(tmp_path / "empty.jsonl", [""])
    with pytest.raises(ValueError, match="no question"):
        load_question_sets([empty])


def test_eval_settings_defaults_and_environment(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    for name in ("KB_EVAL_SETS", "KB_EVAL_GROUPS", "KB_EVAL_MIN_RECALL5", "KB_EVAL_MIN_CITED"):
        monkeypatch.delenv(name, raising=False)
    default = Settings.from_env().evaluation
    assert default.sets == (SETTINGS_ROOT / "samples" / "eval.jsonl",)
    assert default.min_recall_at_5 == 0.9 and default.groups == ()
    monkeypatch.setenv("KB_EVAL_SETS", f"{tmp_path / 'a.jsonl'}:samples/eval.jsonl:")
    monkeypatch.setenv("KB_EVAL_GROUPS", "all-employees, hr")
    monkeypatch.setenv("KB_EVAL_MIN_RECALL5", "0.75")
    monkeypatch.setenv("KB_EVAL_MIN_CITED", "0.5")
    configured = Settings.from_env().evaluation
    assert configured.sets == (tmp_path / "a.jsonl", SETTINGS_ROOT / "samples" / "eval.jsonl")
    assert configured.groups == ("all-employees", "hr")
    assert (configured.min_recall_at_5, configured.min_cited_expected) == (0.75, 0.5)
    monkeypatch.setenv("KB_EVAL_MIN_CITED", "85")
    with pytest.raises(ValueError, match="KB_EVAL_MIN_CITED must lie between 0 and 1"):
        Settings.from_env()


# --- hand-made answers, finished and verified by the service's own code ----------------------

RULES = ("all/就業規則.md", "就業規則", "第20条 有給休暇は5日前までに申請する。")
FAQ = ("all/FAQ.txt", "FAQ", "申請はポータルから行います。")
PAY = ("hr/給与規程.md", "給与規程", "課長の役職手当は月額50,000円とする。")
DOCUMENT_GROUPS = {f"{DOCS}/all/就業規則.md": ["all-employees"],
                   f"{DOCS}/all/FAQ.txt": ["all-employees"],
                   f"{DOCS}/hr/給与規程.md": ["hr", "managers"]}


def answered(text: str, *passages: tuple[str, str, str],
             answerer: str = "hand-made") -> AskResult:
    """The `kb ask` result of an answer `text` given `passages` as [1], [2], ...: citations and
    verification by GroundedAnswers.finish, as the service does it."""
    hits = [SearchHit(rank=n, chunk_id=n, document_id=n, source_uri=f"{DOCS}/{path}", path=path,
                      title=title, heading="", page=None, ocr=False, chunk_index=0,
                      content=content, score=1.0, ranks=Ranks(vector=n, keyword=n))
            for n, (path, title, content) in enumerate(passages, start=1)]
    given = [Passage(n=h.rank, content=h.content, **reference(h)) for h in hits]
    prepared = PreparedAnswer(SearchResult(query="q", took_ms=0.0, hits=hits), given,
                              evidence_found=True, reason=None, started=time.perf_counter(),
                              answerability=1.0, question="有給の申請期限は？")
    answer = answer_from_text(text, answerer)
    return GroundedAnswers(None, None).finish(prepared, answer, "q")  # type: ignore[arg-type]


def asked(expected: str | None, groups: list[str] | None = None) -> EvalQuestion:
    return EvalQuestion(question="有給の申請期限は？", expected_source=expected,
                        answerable=expected is not None, groups=groups)


def measure(cases: list[tuple[EvalQuestion, AskResult]], **kwargs) -> AnswerMetrics:
    kwargs.setdefault("document_groups", DOCUMENT_GROUPS)
    kwargs.setdefault("default_groups", ["all-employees"])
    return evaluate_answers([q for q, _ in cases], [a for _, a in cases], **kwargs)


def test_a_correct_answer_counts_as_right_on_every_measure() -> None:
    report = measure([(asked("all/就業規則.md"), answered("5日前までです。[1]", RULES)),
                      (asked(None), answered(NOT_FOUND, RULES))])
    assert report.cited_expected_rate == 1.0
    assert report.not_found_precision == report.not_found_recall == 1.0
    assert report.answerable_not_found_rate == 0.0
    assert report.numbers_match_rate == report.verified_rate == 1.0
    assert report.forbidden_citations == 0
    assert report.wrong == []


def test_a_wrong_citation_fails_cited_expected() -> None:
    report = measure([
        (asked("all/就業規則.md"), answered("ポータルから申請します。[1]", FAQ, RULES)),
        (asked("all/就業規則.md"), answered("5日前までです。[2]", FAQ, RULES)),
    ])
    assert report.cited_expected_rate == 0.5
    (wrong,) = report.wrong
    assert wrong.reasons == ["does not cite the expected document"]
    assert wrong.cited == [f"{DOCS}/all/FAQ.txt"]
    assert report.numbers_match_rate == 1.0  # the wrong answer has no number to check


def test_a_hallucinated_number_fails_numbers_match_but_not_the_citation() -> None:
    hallucinated = answered("7日前までに申請します。[1]", RULES)
    assert not hallucinated.verified
    assert not numbers_match(hallucinated)
    report = measure([(asked("all/就業規則.md"), hallucinated),
                      (asked("all/就業規則.md"), answered("5日前までです。[1]", RULES)),
                      (asked("all/就業規則.md"), answered("第20条によります。[1]", RULES))])
    assert report.numbers_match_rate == round(2 / 3, 4)
    assert report.cited_expected_rate == 1.0
    assert [w.reasons for w in report.wrong] == [["a number or code is in no cited passage"]]


def test_an_uncited_code_fails_numbers_match() -> None:
    answer = answered("ZP-2041の保証は5日です。[1]", RULES)
    assert not numbers_match(answer)
    assert any(w.startswith("code ZP-2041") for w in answer.warnings)


def test_other_verification_warnings_do_not_count_as_number_mismatches() -> None:
    uncited = answered("有給休暇は申請が必要です。", RULES)  # cites nothing: unverified
    assert not uncited.verified
    assert numbers_match(uncited)


def test_a_missed_not_found_lowers_not_found_recall() -> None:
    report = measure([(asked(None), answered("ポータルから申請します。[1]", FAQ)),
                      (asked(None), answered(NOT_FOUND, FAQ)),
                      (asked("all/就業規則.md"), answered(NOT_FOUND, RULES))])
    assert report.unanswerable == 2
    assert report.not_found_recall == 0.5  # one of the two unanswerable answered
    assert report.not_found_precision == 0.5  # one of the two "not found" was answerable
    assert report.answerable_not_found_rate == 1.0  # the one answerable question refused
    assert report.cited_expected_rate == 0.0
    assert [w.reasons for w in report.wrong] == [["missed not found"], ["said not found"]]


def test_not_found_is_measured_for_each_kind_of_miss_against_the_same_answerable() -> None:
    near = msgspec.structs.replace(asked(None), miss="near")
    far = msgspec.structs.replace(asked(None), miss="far")
    report = measure([(near, answered("ポータルから申請します。[1]", FAQ)),
                      (near, answered(NOT_FOUND, FAQ)),
                      (near, answered(NOT_FOUND, FAQ)),
                      (far, answered(NOT_FOUND, FAQ)),
                      (asked("all/就業規則.md"), answered(NOT_FOUND, RULES)),
                      (asked("all/就業規則.md"), answered("5日前までです。[1]", RULES))])
    assert report.not_found_recall == 0.75
    assert report.by_miss == {
        "far": NotFoundByMiss(unanswerable=1, not_found_precision=0.5, not_found_recall=1.0),
        "near": NotFoundByMiss(unanswerable=3, not_found_precision=round(2 / 3, 4),
                               not_found_recall=round(2 / 3, 4))}
    assert "by_miss" not in msgspec.to_builtins(measure([(asked(None), answered(NOT_FOUND))]))


def test_the_kind_of_miss_describes_only_an_unanswerable_question(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "eval.jsonl", [
        '{"question": "q", "answerable": false, "miss": "near"}',
        '{"question": "q", "expected_source": "a.md", "miss": "far"}'])
    with pytest.raises(ValueError, match="line 2: \"miss\" describes an unanswerable"):
        load_questions(path)
    with pytest.raises(ValueError, match="line 1: .*near.*far|line 1: .*miss"):
        load_questions(write_lines(tmp_path / "bad.jsonl",
                                   ['{"question": "q", "answerable": false, "miss": "close"}']))


def test_an_answer_from_a_forbidden_group_is_a_failure() -> None:
    leaked = answered("役職手当は月額50,000円です。[2] 申請は5日前まで。[1]", RULES, PAY)
    report = measure([(asked("all/就業規則.md", ["all-employees"]), leaked),
                      (asked(None), answered("月額50,000円です。[1]", PAY))])
    assert leaked.verified  # every number is in its passage: only the groups catch it
    assert report.forbidden_citations == 2
    assert report.cited_expected_rate == 0.0  # cites the expected document, and a forbidden one
    assert report.not_found_recall == 0.0
    assert [w.reasons for w in report.wrong] == [
        ["cites a forbidden document"], ["missed not found", "cites a forbidden document"]]


def test_the_same_citation_is_allowed_to_a_question_of_the_right_group() -> None:
    answer = answered("月額50,000円です。[1]", PAY)
    assert measure([(asked("hr/給与規程.md", ["managers"]), answer)]).forbidden_citations == 0
    # the default groups apply to a line without its own
    assert measure([(asked("hr/給与規程.md"), answer)]).forbidden_citations == 1
    assert measure([(asked("hr/給与規程.md"), answer)],
                   default_groups=["hr"]).forbidden_citations == 0


def test_a_document_of_unknown_groups_counts_as_forbidden() -> None:
    answer = answered("5日前までです。[1]", RULES)
    groups = {k: v for k, v in DOCUMENT_GROUPS.items() if "就業規則" not in k}
    report = measure([(asked("all/就業規則.md"), answer)], document_groups=groups)
    assert report.forbidden_citations == 1
    assert measure([(asked("all/就業規則.md"), answer)],
                   document_groups=None).forbidden_citations is None


# --- passage-level scoring, question types and the refusal curve -----------------------------

def test_a_question_with_a_gold_answer_counts_only_the_passage_that_holds_it() -> None:
    q = EvalQuestion(question="いつ引っ越した？", expected_source="j023.md", answer="1865年")
    hits = [[f"{DOCS}/j023.md", f"{DOCS}/j023.md", f"{DOCS}/j001.md"]]
    contents = [["ベル一家はロンドンにいた。", "一家は１８６５ 年に引っ越した。", "1865年"]]
    passage = evaluate([q], hits, k=5, contents=contents)
    assert passage.recall.at_1 == 0.0 and passage.recall.at_5 == 1.0
    assert passage.mrr_at_10 == 0.5  # NFKC and white space: "１８６５ 年" holds "1865年"
    assert evaluate([q], hits, k=5).recall.at_1 == 1.0  # no texts: the document decides
    assert holds_answer("一家は１８６５ 年に", "1865年") and not holds_answer("1866年", "1865年")


def test_figures_by_question_type_appear_only_where_the_set_gives_types() -> None:
    typed = [EvalQuestion(question=f"q{i}", expected_source="a.md", question_type=kind)
             for i, kind in enumerate(["Syntactic variation", "Syntactic variation",
                                       "Logical reasoning"])]
    metrics = evaluate(typed, [[f"{DOCS}/a.md"], [f"{DOCS}/b.md"], [f"{DOCS}/a.md"]], k=5)
    assert {t: (m.n, m.recall.at_1) for t, m in metrics.by_type.items()} == {
        "Logical reasoning": (1, 1.0), "Syntactic variation": (2, 0.5)}
    untyped = evaluate([asked("all/就業規則.md")], [[f"{DOCS}/all/就業規則.md"]], k=5)
    assert "by_type" not in msgspec.to_builtins(untyped)


def test_the_refusal_curve_trades_answerable_refusals_for_not_found_recall() -> None:
    questions = [asked("a.md") for _ in range(4)] + [asked(None) for _ in range(2)]
    curve = refusal_curve(questions, [False] * 5 + [True], [0.9, 0.8, 0.7, 0.3, 0.2, 0.95])
    assert curve[0].answerable_refused == 0.0 and curve[0].not_found_recall == 0.5  # the rule
    assert [p.threshold for p in curve] == sorted(p.threshold for p in curve)
    at_point_7 = next(p for p in curve if p.threshold == 0.7)
    assert (at_point_7.answerable_refused, at_point_7.not_found_recall,
            at_point_7.not_found_precision) == (0.25, 1.0, round(2 / 3, 4))
    assert refusal_curve(questions[:4], [False] * 4, [0.5] * 4) == []  # none to catch


def test_gold_answers_give_the_share_containing_them_and_the_answer_lengths() -> None:
    gold = EvalQuestion(question="有給の申請期限は？", expected_source="all/就業規則.md",
                        answer="5日前")
    metrics = measure([(gold, answered("5日前までです。[1]", RULES)),
                       (asked("all/就業規則.md"), answered("申請は書面で行う。[1]", RULES))])
    assert metrics.gold_in_answer_rate == 1.0  # of the questions that give a gold answer
    assert (metrics.answer_chars_median, metrics.answer_chars_p90) == (8.0, 9.0)
    assert "gold_in_answer_rate" not in msgspec.to_builtins(
        measure([(asked("all/就業規則.md"), answered("5日前までです。[1]", RULES))]))


def test_answers_are_counted_numbered_as_read_only_when_their_marks_and_citations_run_from_1():
    finished = answered("申請はポータルから行います。[2]5日前までに申請する。[1]", RULES, FAQ)
    assert finished.answer.endswith("[1]5日前までに申請する。[2]")  # renumbered by finish
    assert numbered_in_order(finished)
    as_retrieved = msgspec.structs.replace(
        finished, answer="申請はポータルから行います。[2]5日前までに申請する。[1]")
    listed_apart = msgspec.structs.replace(finished, citations=finished.citations[::-1])
    assert not numbered_in_order(as_retrieved) and not numbered_in_order(listed_apart)
    metrics = measure([(asked("all/就業規則.md"), finished),
                       (asked("all/就業規則.md"), as_retrieved)])
    assert metrics.citations_in_order_rate == 0.5


def test_quotes_count_as_holding_what_an_extractive_answer_took_only_when_they_quote_it():
    extractive = answered("第20条 有給休暇は5日前までに申請する。[1]", RULES, answerer="extractive")
    assert quotes_hold(extractive) == [True]
    (citation,) = extractive.citations
    first_characters = msgspec.structs.replace(
        extractive, citations=[msgspec.structs.replace(citation, quote="第20条 有給")])
    assert quotes_hold(first_characters) == [False]
    metrics = measure([(asked("all/就業規則.md"), extractive),
                       (asked("all/就業規則.md"), first_characters)])
    assert metrics.quotes_hold_answer_rate == 0.5
    hand_made = measure([(asked("all/就業規則.md"), answered("5日前です。[1]", RULES))])
    assert "quotes_hold_answer_rate" not in msgspec.to_builtins(hand_made)  # no extractive
