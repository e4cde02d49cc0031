"""Questions a table answers (kb_search/tables/): the question read against the tables, the
table chosen, and its answer stated or computed from the cells, without a database."""

from __future__ import annotations

from decimal import Decimal

from kb_search.tables import StoredRow, StoredTable, choose_answer, recount
from kb_search.tables.choice import FoundPassage


def _table(columns: list[str], rows: list[list[str]], *, number: int = 0, document: int = 1,
           units: list[str | None] | None = None, notes: list[str] | None = None,
           location: str | None = None, caption: str = "", title: str = "文書"
           ) -> StoredTable:
    return StoredTable(
        document_id=document, table_no=number, title=title, path=f"docs/{title}.xlsx",
        location=location, caption=caption, columns=columns,
        units=units or [None] * len(columns), notes=notes or [],
        rows=[StoredRow(row_no=i, chunk_id=100 * document + number, cells=cells)
              for i, cells in enumerate(rows)])


PRICES = _table(["品番", "品名", "単価", "仕入先"],
                [["P-100", "ギヤ", "39,800", "東洋精工"], ["P-200", "シール", "1,200", "北辰工業"],
                 ["P-300", "軸受", "39,800", "東洋精工"], ["P-400", "ばね", "850", "北辰工業"]],
                units=[None, None, "円", None], location="シート: 価格表",
                notes=["注1 単価は税抜き。"])
SPECS = _table(["型式", "最大推力 (N)", "質量 (kg)"],
               [["ZX-3100", "400", "3.6"], ["ZX-3150", "350", "4.2"]],
               number=1, units=[None, "N", "kg"], location="シート: ZXシリーズ")
PUMPS = _table(["型式", "消費電力 (W)", "質量 (kg)"], [["ZP-2041", "45", "1.8"]],
               number=2, units=[None, "W", "kg"], location="シート: ZPシリーズ")
ALLOWANCES = _table(
    ["地域区分", "対象地域", "日当：役員", "日当：管理職", "日当：一般社員"],
    [["A地域", "北米、欧州", "9,000", "7,000", "6,000"],
     ["B地域", "中国、韓国", "6,500", "5,000", "4,500"]],
    number=3, units=[None, None, "円", "円", "円"],
    notes=["注1 管理職とは課長以上（G6以上）をいう。"], caption="別表3 海外出張の日当")
TABLES = [PRICES, SPECS, PUMPS, ALLOWANCES]


def _ask(question: str, tables: list[StoredTable] = TABLES,
         passages: tuple[FoundPassage, ...] = ()):
    return choose_answer(question, tables, {}, [], list(passages))


def _text(question: str, tables: list[StoredTable] = TABLES) -> str:
    answer = _ask(question, tables)
    assert answer is not None and not answer.missing, answer
    return "\n".join(s.text for s in answer.sentences)


def test_a_cell_is_stated_in_a_sentence_with_its_unit():
    assert _text("ZX-3150の最大推力は？") == "ZX-3150の最大推力は350 Nです。"


def test_several_columns_of_one_row_are_stated_together():
    assert _text("ZX-3100の最大推力と質量を教えてください") == (
        "ZX-3100の最大推力は400 N、質量は3.6 kgです。")


def test_the_notes_that_name_the_column_follow_the_cell():
    assert _text("P-200の単価はいくらですか").splitlines() == ["P-200の単価は1,200円です。",
                                                       "注1 単価は税抜き。"]


def test_a_matrix_is_read_by_both_headers_and_the_notes_category():
    # 課長 is no column: the note defines 管理職 as 課長以上.
    assert _text("課長がB地域に出張したときの日当は？") == "B地域の日当（管理職）は5,000円です。"


def test_a_column_under_a_merged_header_left_open_lists_every_candidate():
    assert _text("B地域の日当はいくらですか") == (
        "B地域の日当は役員が6,500円、管理職が5,000円、一般社員が4,500円です。")


def test_the_largest_is_computed_and_a_tie_stated_as_a_tie():
    answer = _ask("単価がいちばん高い部品は？")
    assert answer.sentences[0].text == (
        "価格表の4件のうち単価がいちばん高いのはP-100とP-300（いずれも39,800円）です。")
    assert answer.computed == ["4"] and recount(answer) == [Decimal(4)]


def test_the_smallest_is_read_from_the_words_after_the_marker():
    assert "P-400（850円）" in _text("いちばん単価が安い品番はどれ？")


def test_rows_meeting_a_condition_are_counted_and_named():
    assert _text("仕入先が東洋精工の部品は何品目ありますか").splitlines() == [
        "価格表で仕入先が東洋精工のものは2件です。", "該当：P-100、P-300。"]
    assert _text("単価が1,000円以上の部品はいくつありますか").startswith(
        "価格表で単価が1,000円以上のものは3件です。")
    assert _text("単価が1,200円未満の部品の数を教えてください").startswith(
        "価格表で単価が1,200円未満のものは1件です。")


def test_a_counter_after_a_column_of_numbers_asks_the_value_not_a_count():
    assert _text("ZP-2041の消費電力は何Wですか") == "ZP-2041の消費電力は45 Wです。"


def test_two_rows_are_compared_on_the_column_named():
    assert _text("ZX-3100とZX-3150ではどちらの最大推力が大きいですか") == (
        "ZX-3100のほうが最大推力が大きいです（ZX-3100 400 N、ZX-3150 350 N）。")


def test_a_row_without_the_asked_column_is_not_found_not_the_nearest_column():
    answer = _ask("ZX-3100の消費電力は何Wですか")
    assert answer is not None and answer.missing and "ZX-3100" in answer.missing


def test_a_code_shaped_like_the_keys_but_absent_is_not_found():
    answer = _ask("ZX-3200の最大推力は？")
    assert answer is not None and answer.missing and "ZX-3200" in answer.missing


def test_a_name_like_the_keys_that_no_passage_writes_is_not_found():
    rooms = _table(["会議室名", "定員"], [["応接室B", "6"], ["第1会議室", "12"]])
    answer = _ask("応接室Aの定員は何人ですか", [rooms],
                  (FoundPassage("会議室一覧", "会議室名 | 定員 応接室B | 6"),))
    assert answer is not None and answer.missing


def test_questions_no_table_answers_are_left_to_the_passages():
    for question in ("ZP-2045の保証期間が延びたのはなぜですか",  # a reason
                     "P-100の件で、仕入先の変更は行いましたか",  # 仕入先 qualifies 変更
                     "就業規則の目的は何ですか"):  # no column at all
        assert _ask(question) is None, question


def test_a_row_named_by_a_document_the_search_found_is_left_to_that_document():
    ledger = _table(["NC番号", "ロット", "関連報告書"], [["NC-2510-04", "2541-07", "QC-2031"]])
    question = "QC-2031で対象になったロット番号は？"
    assert _text(question, [ledger]) == "NC-2510-04（QC-2031）のロットは2541-07です。"
    report = FoundPassage("品質検査報告書 QC-2031", "対象ロットは 2541-07 である。")
    assert _ask(question, [ledger], (report,)) is None


def test_only_the_rows_given_are_read():
    # The caller's rows are all a table answer reads: a row it may not read is never counted.
    readable = _table(PRICES.columns, [r.cells for r in PRICES.rows[:2]], units=PRICES.units,
                      location=PRICES.location)
    assert _text("仕入先が東洋精工の部品は何品目ありますか", [readable]).startswith(
        "価格表で仕入先が東洋精工のものは1件です。")
