"""Citations as the reader meets them: numbered in the order the answer first cites each passage,
whole or streamed delta by delta, and quoting what the answer took from each passage (the
extractive answerer's sentences, an LLM answer's supporting sentences), finished by the
service's own code (GroundedAnswers.finish)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from kb_eval.answers import numbered_in_order, quotes_hold
from kb_search.answerers import Answer, Passage
from kb_search.answerers.answer import answer_from_text, citations, claims
from kb_search.answerers.extractive import ExtractiveAnswerer
from kb_search.answerers.numbering import (
    CitationNumber,
    CitationNumbers,
    NumberedStream,
    renumber,
)
from kb_search.grounded_answers import AskResult, GroundedAnswers, PreparedAnswer
from kb_search.passage_reference import reference
from kb_search.quoting import GAP
from kb_search.search import Ranks, SearchHit, SearchResult

LEAVE = Passage(
    n=1, chunk_id=11, document_id=11, ocr=False,
    path="all/就業規則.md", title="就業規則", heading="第14条（年次有給休暇）",
    page=None,
    content=("1. 入社日から6か月間継続勤務した従業員には、10日の年次有給休暇を付与する。\n\n"
             "| 勤続期間 | 6か月 | 1年6か月 |\n|---|---|---|\n| 付与日数 | 10日 | 11日 |\n\n"
             "2. 年次有給休暇を取得しようとする者は、取得予定日の3営業日前までに申請し、"
             "所属長の承認を得なければならない。\n"
             "3. 会社は、事業の正常な運営を妨げる場合は、他の時季に変更することがある。\n"
             "4. 病気その他の急な事由により当日に取得する場合は、始業時刻から1時間以内に所属長へ"
             "連絡し、出勤後3営業日以内に事後申請を行わなければならない。"),
)
TRAVEL = Passage(
    n=2, chunk_id=22, document_id=22, ocr=False,
    path="all/出張旅費規程.md", title="出張旅費規程", heading="第8条（宿泊費）",
    page=None,
    content=("宿泊費は、別表の上限額の範囲内で実費を支給する。上限を超えた差額は自己負担とする。"
             "領収書は精算時に提出する。"),
)
EXPENSES = Passage(
    n=3, chunk_id=33, document_id=33, ocr=False,
    path="all/経費精算規程.md", title="経費精算規程", heading="第5条（上限）",
    page=None,
    content=("交際費は1人あたり5,000円を上限とする。上限を超える場合は事前に部長の承認を得る。"
             "消耗品費は1件3万円までとする。"),
)
GIVEN = [LEAVE, TRAVEL, EXPENSES]
QUESTION = "有給休暇は何日前までに申請が必要ですか"


def finished(answer: Answer, passages: list[Passage] = GIVEN, question: str = QUESTION,
             read_by_ocr: frozenset[int] = frozenset()) -> AskResult:
    """The `kb ask` result of `answer` given `passages` as retrieved, by GroundedAnswers.finish; the
    chunks `read_by_ocr` came from scans."""
    hits = [SearchHit(rank=p.n, chunk_id=p.chunk_id, document_id=p.n, source_uri=p.path,
                      path=p.path, title=p.title, heading=p.heading, page=p.page,
                      ocr=p.chunk_id in read_by_ocr, chunk_index=0, content=p.content,
                      score=1.0, ranks=Ranks(vector=p.n, keyword=p.n))
            for p in passages]
    # As GroundedAnswers.retrieve gives them: each passage made from its hit.
    given = [Passage(n=h.rank, content=h.content, **reference(h)) for h in hits]
    prepared = PreparedAnswer(SearchResult(query=question, took_ms=0.0, hits=hits), given,
                              evidence_found=True, reason=None, started=time.perf_counter(),
                              answerability=1.0, question=question)
    return GroundedAnswers(None, None).finish(prepared, answer, "q")  # type: ignore[arg-type]


def parts(quote: str) -> list[str]:
    return quote.split(GAP)


# --- numbering ------------------------------------------------------------------------------

def test_citations_are_numbered_in_the_order_the_answer_first_cites_them():
    text, numbers = renumber("宿泊費は実費です[3]。交際費も上限があります[1]。差額は自己負担[3]。",
                             [1, 2, 3])
    assert text == "宿泊費は実費です[1]。交際費も上限があります[2]。差額は自己負担[1]。"
    assert numbers == [CitationNumber(n=1, passage=3), CitationNumber(n=2, passage=1)]


def test_every_written_form_of_a_mark_becomes_one_mark_per_passage():
    text, _ = renumber("A［２，３］B[3、 1]C[ 2 ]", [1, 2, 3])
    assert text == "A[1][2]B[2][3]C[1]"


def test_a_number_that_points_at_no_passage_is_kept_for_verification_to_name():
    text, numbers = renumber("A[9]B[2]", [1, 2, 3])
    assert text == "A[9]B[1]" and numbers == [CitationNumber(n=1, passage=2)]
    result = finished(answer_from_text("宿泊費は実費です[9]。差額は自己負担です[2]。", "llm"))
    assert "citation [9] points at no passage" in result.warnings
    assert [(c.n, c.passage) for c in result.citations] == [(1, 2)]


def test_a_citation_says_whether_its_passage_was_read_from_a_scan():
    result = finished(answer_from_text("宿泊費は実費です[2]。申請は3営業日前までです[1]。", "llm"),
                      read_by_ocr=frozenset({TRAVEL.chunk_id}))
    assert [(c.n, c.chunk_id, c.ocr) for c in result.citations] == [
        (1, TRAVEL.chunk_id, True), (2, LEAVE.chunk_id, False)]


MARKED = st.lists(st.one_of(st.sampled_from(["[1]", "[2]", "[3]", "［２］", "[1, 3]", "[7]",
                                             "[", "]", "3", "、"]),
                            st.text(alphabet="有給休暇の申請は日前", max_size=6)),
                  max_size=12).map("".join)


@settings(max_examples=200, deadline=None)
@given(text=MARKED, cuts=st.lists(st.integers(0, 200), max_size=8))
def test_a_stream_cut_anywhere_is_renumbered_as_the_whole_text(text, cuts):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    deltas = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    numbers = CitationNumbers([1, 2, 3])
    streamed = [numbers.feed(d) for d in deltas] + [numbers.flush()]
    whole, told = renumber(text, [1, 2, 3])
    assert "".join(streamed) == whole and numbers.numbers == told


class Streamed:
    """An answer that arrives in the deltas given, as a model streams it."""

    def __init__(self, deltas: list[str]) -> None:
        self.deltas = deltas

    def __iter__(self) -> Iterator[str]:
        return iter(self.deltas)

    def result(self) -> Answer:
        return answer_from_text("".join(self.deltas), "llm")


def test_a_streamed_delta_tells_each_number_it_cites_for_the_first_time():
    stream = NumberedStream(Streamed(["宿泊費は実費です[", "3]。交際費[1", "]も。差額[3]。"]),
                            [1, 2, 3])
    shown = list(stream)
    assert [d.text for d in shown] == ["宿泊費は実費です", "[1]。交際費", "[2]も。差額[1]。"]
    assert [d.cited for d in shown] == [[], [CitationNumber(1, 3)], [CitationNumber(2, 1)]]
    assert finished(stream.result()).answer == "".join(d.text for d in shown)


# --- quotes of the extractive answerer -------------------------------------------------------

def test_the_quote_is_the_quoted_sentences_in_passage_order_with_a_gap_between_places():
    answer = answer_from_text(
        "4. 病気その他の急な事由により当日に取得する場合は、始業時刻から1時間以内に所属長へ連絡し、"
        "出勤後3営業日以内に事後申請を行わなければならない。[1]\n"
        "2. 年次有給休暇を取得しようとする者は、取得予定日の3営業日前までに申請し、"
        "所属長の承認を得なければならない。[1]", "extractive")
    (citation,) = finished(answer).citations
    assert parts(citation.quote) == [
        "2. 年次有給休暇を取得しようとする者は、取得予定日の3営業日前までに申請し、"
        "所属長の承認を得なければならない。",
        "4. 病気その他の急な事由により当日に取得する場合は、始業時刻から1時間以内に所属長へ連絡し、"
        "出勤後3営業日以内に事後申請を行わなければならない。"]
    assert not citation.quote.startswith("1. 入社日から")  # never the passage's first lines
    assert citation.context_before == "| 付与日数 | 10日 | 11日 |"
    assert citation.context_after == ""


def test_sentences_that_follow_one_another_are_quoted_as_the_passage_writes_them():
    answer = answer_from_text("上限を超えた差額は自己負担とする。[2]領収書は精算時に提出する。[2]",
                              "extractive")
    (citation,) = finished(answer).citations
    assert citation.quote == "上限を超えた差額は自己負担とする。領収書は精算時に提出する。"
    assert citation.context_before == "宿泊費は、別表の上限額の範囲内で実費を支給する。"


def test_a_quoted_table_row_is_quoted_under_its_header():
    answer = answer_from_text("| 勤続期間 | 6か月 | 1年6か月 |\n| 付与日数 | 10日 | 11日 |[1]",
                              "extractive")
    (citation,) = finished(answer).citations
    assert parts(citation.quote) == ["| 勤続期間 | 6か月 | 1年6か月 |",
                                     "| 付与日数 | 10日 | 11日 |"]
    assert quotes_hold(finished(answer)) == [True]


SENTENCES = st.sampled_from([
    "有給休暇は取得日の3日前までに申請する。", "申請は勤怠システムで行う。", "所属長が承認する。",
    "出張の宿泊費は1泊12,000円を上限とする。", "交際費は5,000円までとする。", "ただし急病は除く。",
    "半日単位でも取得できる。"])
LINES = st.lists(SENTENCES, min_size=1, max_size=3).map("".join)
TABLE = st.just("| 区分 | 上限 |\n|---|---|\n| 役員 | 15,000円 |\n| 部長 | 13,000円 |")
CONTENTS = st.lists(st.one_of(LINES, TABLE), min_size=1, max_size=4).map("\n".join)


@settings(max_examples=80, deadline=None)
@given(contents=st.lists(CONTENTS, min_size=1, max_size=5),
       question=st.sampled_from(["有給休暇は何日前までに申請しますか", "宿泊費の上限はいくらですか",
                                 "役員の宿泊費の上限はいくら？",
                                 "交際費と宿泊費の上限はどう違いますか"]))
def test_every_extractive_citation_quotes_its_passage_and_each_sentence_taken_from_it(
    contents, question
):
    passages = [Passage(n=i, chunk_id=i, document_id=i, ocr=False,
                        path=f"d/{i}.md", title="規程", heading="第1条",
                        page=None, content=c) for i, c in enumerate(contents, start=1)]
    result = finished(ExtractiveAnswerer().answer(question, passages), passages, question)
    by_n = {p.n: p for p in passages}
    for citation in result.citations:
        content = by_n[citation.passage].content
        assert all(part in content for part in parts(citation.quote))
        taken = [c.text for c in claims(result.answer) if citation.n in c.cites]
        assert taken, "a citation is listed only when the answer cites it"
        for sentence in taken:  # a table row is quoted under its header, a gap between
            assert all(line in citation.quote for line in sentence.split("\n"))
    assert all(quotes_hold(result))
    assert not result.found or numbered_in_order(result)


# --- quotes of an LLM answer -----------------------------------------------------------------

def test_an_llm_answers_quote_is_the_sentence_holding_its_numbers():
    answer = answer_from_text("交際費の上限は1人5,000円です[3]。宿泊費は上限の範囲で実費です[2]。",
                              "claude")
    result = finished(answer)
    assert [(c.n, c.passage) for c in result.citations] == [(1, 3), (2, 2)]
    assert result.citations[0].quote == "交際費は1人あたり5,000円を上限とする。"
    assert result.citations[1].quote == "宿泊費は、別表の上限額の範囲内で実費を支給する。"
    assert result.verified


def test_an_llm_answers_quote_without_support_is_the_passages_best_sentence_for_the_question():
    result = finished(answer_from_text("規程に定めがあります[1]。", "claude"))
    (citation,) = result.citations
    assert "3営業日前までに申請し" in citation.quote
    assert not citation.quote.startswith("1. 入社日から")


def test_verification_names_the_readers_numbers():
    result = finished(answer_from_text("交際費は5,000円です[3]。宿泊費は99円です[2]。", "claude"))
    assert result.answer == "交際費は5,000円です[1]。宿泊費は99円です[2]。"
    assert not result.verified
    assert "number 99 does not appear in cited passage [2]" in result.warnings


def test_an_answer_cites_only_what_it_numbers_and_lists_nothing_else():
    result = finished(answer_from_text("宿泊費は実費です[2]。", "claude"))
    assert [c.n for c in result.citations] == [1] and citations(result.answer) == [1]


# --- readable extractive answers -------------------------------------------------------------

def test_sentences_from_different_places_start_a_line_and_a_list_marker_never_sticks_to_a_mark():
    question = "有給休暇は何日前までに申請し、急な病気のときはいつまでに連絡しますか"
    text = ExtractiveAnswerer().answer(question, [LEAVE]).text
    between = re.split(r"\[\d+\]", text)[1:-1]
    assert len(between) >= 1 and all(after.startswith("\n") for after in between)
    assert re.search(r"\]\d+\.", text) is None  # no 「…[1]4. 病気…」
