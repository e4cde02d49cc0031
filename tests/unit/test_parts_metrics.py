"""The multi-part figures of `kb eval` (kb_eval/parts.py) over hand-made answers: documents cited
and gold answers held across the parts, against the parts asked alone; parts no readable
document answers; comparisons; lengths and latencies; and where the JSON carries them."""

from __future__ import annotations

import msgspec
import pytest

from kb_eval.answers import evaluate_answers
from kb_eval.parts import PartsAsked, comparison_right, evaluate_parts, part_blocks
from kb_eval.question_sets import EvalPart, EvalQuestion
from kb_eval.report.payload import json_payload
from kb_eval.run import EvalReport
from kb_search import NOT_FOUND, AnswerPart, AskResult, Citation, Comparison

DOCS = "/kb/docs"
RULES = "all/育児介護休業規程.md"
TRAVEL = "all/出張旅費規程.pdf"

# 「育児休業と介護休業では、申請の期限はどう違いますか」 answered part by part, as the engine
# writes it.
BOTH = ("【育児休業】\n休業開始予定日の1か月前までに申し出る。[1]\n\n"
        "【介護休業】\n休業開始予定日の2週間前までに申し出る。[2]\n\n"
        "比較：育児休業は1か月[1]、介護休業は2週間[2]で、…")


def cited(n: int, path: str) -> Citation:
    return Citation(n=n, passage=n, source_uri=f"{DOCS}/{path}", path=path, title="",
                    heading="", page=None, ocr=False, chunk_id=n, document_id=n, quote="",
                    context_before="", context_after="")


def result(text: str, paths: list[str], parts: list[AnswerPart] | None = None,
           comparison: Comparison | None = None, found: bool = True) -> AskResult:
    return AskResult(query_id="q", answer=text, found=found, verified=True, warnings=[],
                     answerer="extractive", took_ms=0.0,
                     citations=[cited(n, p) for n, p in enumerate(paths, start=1)],
                     parts=parts or [], comparison=comparison)


def part(label: str, found: bool = True, citations: list[int] | None = None) -> AnswerPart:
    return AnswerPart(question=f"{label}は？", label=label, found=found,
                      citations=citations if citations is not None else [1] * found)


def leave_question(form: str | None = None) -> EvalQuestion:
    return EvalQuestion(question="育児休業と介護休業では、申請の期限はどう違いますか", form=form,
                        parts=[EvalPart("育児休業の申出期限は？", RULES, "1か月前"),
                               EvalPart("介護休業の申出期限は？", RULES, "2週間前")])


def alone(*texts: str) -> list[AskResult]:
    """The parts asked alone: a text, or NOT_FOUND."""
    return [result(t, [RULES] if t != NOT_FOUND else [], found=t != NOT_FOUND) for t in texts]


def asked(answer: AskResult, separate: list[AskResult], took_ms: float = 100.0,
          separate_ms: float = 50.0) -> PartsAsked:
    return PartsAsked(answer=answer, took_ms=took_ms, separate=separate,
                      separate_ms=[separate_ms] * len(separate))


def answered_in_parts() -> AskResult:
    return result(BOTH, [RULES, RULES], [part("育児休業", citations=[1]),
                                         part("介護休業", citations=[2])])


def test_part_blocks_are_each_answered_parts_text_without_its_marks():
    text = BOTH.replace("【介護休業】\n休業開始予定日の2週間前までに申し出る。[2]",
                        "「介護休業」については該当する記載が見つかりませんでした。")
    assert part_blocks(BOTH) == ["休業開始予定日の1か月前までに申し出る。",
                                 "休業開始予定日の2週間前までに申し出る。"]
    assert part_blocks(text) == ["休業開始予定日の1か月前までに申し出る。"]
    assert part_blocks("1か月前までに申し出る。[1]") == []  # answered whole


def test_an_answer_citing_and_holding_every_part_is_right_on_every_measure():
    separate = alone("1か月前までです。[1]", "2週間前までです。[1]")
    metrics = evaluate_parts([leave_question()], [asked(answered_in_parts(), separate)])
    assert (metrics.n, metrics.parts, metrics.gold) == (1, 2, 1)
    assert metrics.answered_in_parts_rate == metrics.all_cited_rate == 1.0
    assert metrics.part_cited_rate == metrics.all_held_rate == 1.0
    assert metrics.separate_all_held_rate == metrics.held_ratio == 1.0
    assert metrics.wrong == []


def test_a_part_whose_document_is_not_cited_fails_the_question_but_not_the_other_part():
    question = msgspec.structs.replace(leave_question(), parts=[
        EvalPart("育児休業の申出期限は？", RULES, "1か月前"),
        EvalPart("出張申請の期限は？", TRAVEL, "5営業日前")])
    answer = result("【育児休業】\n1か月前までに申し出る。[1]\n\n"
                    "【出張】\n5営業日前までに申請する。[1]",
                    [RULES], [part("育児休業"), part("出張")])
    metrics = evaluate_parts([question], [asked(answer, alone("1か月前。[1]", "5営業日前。[1]"))])
    assert metrics.all_cited_rate == 0.0 and metrics.part_cited_rate == 0.5
    assert metrics.all_held_rate == 1.0  # the gold texts are there, from the wrong document
    assert metrics.wrong[0].reasons == ["part 2: its document is not cited"]


def test_gold_answers_held_together_are_set_against_the_parts_asked_alone():
    only_first = result("【育児休業】\n1か月前までに申し出る。[1]\n\n"
                        "「介護休業」については該当する記載が見つかりませんでした。",
                        [RULES], [part("育児休業"), part("介護休業", found=False)])
    cases = [asked(only_first, alone("1か月前です。[1]", "2週間前です。[1]")),
             asked(answered_in_parts(), alone("1か月前です。[1]", NOT_FOUND))]
    metrics = evaluate_parts([leave_question()] * 2, cases)
    assert metrics.all_held_rate == 0.5  # the second, whose answer holds both
    assert metrics.separate_all_held_rate == 0.5  # the first, whose parts alone hold theirs
    assert metrics.held_ratio == 1.0
    assert metrics.wrong[0].reasons == ["part 2: its gold answer is not in the answer"]


def test_a_part_no_readable_document_answers_must_be_named_not_found():
    question = EvalQuestion(question="課長の役職手当と宿泊費の上限は？", parts=[
        EvalPart("課長の役職手当は？", answerable=False),
        EvalPart("課長の宿泊費の上限は？", TRAVEL, "12000")])
    named = result("「役職手当」については該当する記載が見つかりませんでした。\n\n"
                   "【宿泊費】\n12000[1]", [TRAVEL],
                   [part("役職手当", found=False), part("宿泊費")])
    leaked = msgspec.structs.replace(named, parts=[part("役職手当"), part("宿泊費")])
    whole = msgspec.structs.replace(named, parts=[])
    nothing = result(NOT_FOUND, [], found=False)
    separate = alone(NOT_FOUND, "12000円です。[1]")
    metrics = evaluate_parts([question] * 4, [asked(a, separate)
                                              for a in (named, leaked, whole, nothing)])
    # Answered whole, an answer that says something does not say which part it leaves out.
    assert (metrics.unanswerable_parts, metrics.unanswerable_answered) == (4, 2)
    answered_anyway = "part 1: answered, though no document the caller may read answers it"
    assert [w.reasons for w in metrics.wrong] == [
        [answered_anyway], [answered_anyway],
        ["part 2: its document is not cited", "part 2: its gold answer is not in the answer"]]
    assert metrics.gold == 4  # the answerable part gives its gold: it alone is checked


@pytest.mark.parametrize(("values", "golds", "right"), [
    (["1か月", "2週間"], ["1か月前", "2週間前"], True),
    (["12,000円", "13,000円"], ["12000", "13000"], True),  # thousands separators aside
    (["１，５００円", "5,000円"], ["1,500円", "5,000円以下"], True),  # NFKC
    (["28日", "93日"], ["1か月前", "2週間前"], False),  # values of another fact
    (["8日", "30日"], ["28日前", "30日前"], False),  # 8日 is not in 28日前
    (["1か月", "1か月"], ["1か月前", "2か月前"], False),
    (["1か月"], ["1か月前", "2週間前"], False),  # not one value per part
])
def test_a_comparison_is_right_only_when_each_value_is_its_parts_gold_answer(values, golds,
                                                                             right):
    parts = [EvalPart(f"q{i}", RULES, gold) for i, gold in enumerate(golds)]
    assert comparison_right(values, parts) is right


def test_comparisons_stated_are_counted_right_and_wrong():
    right = msgspec.structs.replace(answered_in_parts(), comparison=Comparison(
        text="育児休業は1か月、介護休業は2週間で、…", values=["1か月", "2週間"]))
    wrong = msgspec.structs.replace(answered_in_parts(), comparison=Comparison(
        text="育児休業は28日、介護休業は93日で、介護休業の方が長いです。", values=["28日", "93日"]))
    separate = alone("1か月前。[1]", "2週間前。[1]")
    metrics = evaluate_parts([leave_question()] * 3, [asked(a, separate) for a in (
        right, wrong, answered_in_parts())])
    assert (metrics.comparisons_stated, metrics.comparisons_right,
            metrics.comparisons_wrong) == (2, 1, 1)
    assert metrics.wrong[0].reasons == [
        "wrong comparison: 育児休業は28日、介護休業は93日で、介護休業の方が長いです。"]


def test_lengths_and_latencies_are_nearest_rank_quantiles():
    short = result("【育児休業】\n1か月前。[1]\n\n【介護休業】\n2週間前。[2]", [RULES, RULES],
                   [part("育児休業", citations=[1]), part("介護休業", citations=[2])])
    separate = alone("1か月前です。[1]", NOT_FOUND)  # a "not found" has no length
    cases = [asked(answered_in_parts(), separate, took_ms=300.0, separate_ms=150.0),
             asked(short, separate, took_ms=100.0, separate_ms=50.0)]
    metrics = evaluate_parts([leave_question()] * 2, cases)
    assert (metrics.part_chars_median, metrics.part_chars_p90) == (5.0, 20.0)  # 5 5 20 20
    assert (metrics.separate_chars_median, metrics.separate_chars_p90) == (7.0, 7.0)
    assert (metrics.latency_ms_median, metrics.latency_ms_p95) == (100.0, 300.0)
    assert (metrics.separate_latency_ms_median, metrics.separate_latency_ms_p95) == (
        50.0, 150.0)


def test_single_questions_answered_in_parts_are_the_splits_of_nothing():
    single = result("1か月前までです。[1]", [RULES])
    split = msgspec.structs.replace(single, parts=[part("a"), part("b")])
    metrics = evaluate_parts([leave_question()], [asked(answered_in_parts(),
                                                        alone("1か月前", "2週間前"))],
                             [single, split, single, single])
    assert (metrics.single_questions, metrics.single_in_parts_rate) == (4, 0.25)


def test_figures_by_form_appear_only_where_the_set_gives_forms():
    whole = result("1か月前、2週間前です。[1]", [RULES])
    separate = alone("1か月前", "2週間前")
    metrics = evaluate_parts([leave_question("また"), leave_question("また"),
                              leave_question("none")],
                             [asked(answered_in_parts(), separate), asked(whole, separate),
                              asked(whole, separate)])
    assert {form: (m.n, m.answered_in_parts_rate) for form, m in metrics.by_form.items()} == {
        "また": (2, 0.5), "none": (1, 0.0)}
    plain = evaluate_parts([leave_question()], [asked(whole, separate)])
    assert "by_form" not in msgspec.to_builtins(plain)


def test_parts_asked_alone_must_align_with_the_questions_parts():
    with pytest.raises(ValueError, match="1 parts asked alone for the 2"):
        evaluate_parts([leave_question()], [asked(answered_in_parts(), alone("1か月前"))])
    with pytest.raises(ValueError, match="0 answers for 1"):
        evaluate_parts([leave_question()], [])


def test_the_json_carries_parts_only_where_the_set_has_multi_part_questions():
    single = EvalQuestion(question="育児休業の申出期限は？", expected_source=RULES)
    answers = evaluate_answers([single], [result("1か月前。[1]", [RULES])])
    report = EvalReport(questions=1, k=5, modes={}, curves={}, answers=answers)
    plain = msgspec.to_builtins(json_payload(report, None))
    assert plain == msgspec.to_builtins(answers)  # a single-question set: as before
    parts = evaluate_parts([leave_question()], [asked(answered_in_parts(),
                                                      alone("1か月前", "2週間前"))])
    mixed = msgspec.structs.replace(report, questions=2, parts=parts)
    payload = msgspec.to_builtins(json_payload(mixed, None))
    assert list(payload) == [*plain, "parts"] and payload["parts"]["n"] == 1
    assert set(msgspec.to_builtins(json_payload(mixed, "all"))) == {"modes", "answers", "parts"}
