"""Tables kept as cells by every parser that meets one (kb_pipeline/parsing/table_cells.py), and
workbook values as their number formats show them (number_formats.py)."""

from __future__ import annotations

import datetime as dt
import io

import docx
import openpyxl
import pptx
import pytest
from pptx.util import Inches

from kb_pipeline.parsing import ParseError, parse_document
from kb_pipeline.parsing.number_formats import shown
from kb_pipeline.parsing.table_cells import read_table, unit_in


def _saved(document: object) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(("value", "number_format", "expected"), [
    (0.05, "0%", "5%"),
    (0.125, "0.0%", "12.5%"),
    (39800, "#,##0", "39,800"),
    (2, "0.0", "2.0"),
    (2.5, "0", "3"),  # half away from zero, as Excel rounds
    (1200, '"¥"#,##0', "¥1,200"),
    (1500, '#,##0"円"', "1,500円"),
    (-5, "#,##0;[Red]-#,##0", "-5"),
    (1234567, "#,##0,", "1,235"),
    (dt.datetime(2021, 4, 1), 'yyyy"年"m"月"', "2021年4月"),
    (dt.datetime(2021, 4, 1), "yyyy/mm/dd", "2021/04/01"),
])
def test_a_value_is_written_as_its_number_format_shows_it(value, number_format, expected):
    assert shown(value, number_format) == expected


@pytest.mark.parametrize(("value", "number_format"), [
    (5, "General"), ("text", "0%"), (dt.datetime(2021, 4, 1, 9, 5), "yyyy-mm-dd h:mm:ss"),
    (dt.datetime(2021, 4, 1), '[$-411]ggge"年"m"月"d"日"'),
])
def test_formats_this_reader_does_not_render_leave_the_value_plain(value, number_format):
    assert shown(value, number_format) is None


def test_rows_under_the_header_are_told_apart_as_data_notes_and_totals():
    table = read_table([
        ["部品価格表"], ["（単位：円）"],
        ["品番", "品名", "単価", "在庫数"],
        ["P-1", "ギヤ", "1,200", "5"],
        ["", "", "", ""],
        ["P-2", "シール", "300", "40"],
        ["合計", "", "1,500", "45"],
        ["注1　単価は税抜き。"], ["　2026年4月改定。"],
    ], header_at=2, location="シート: 価格表")
    assert table is not None
    assert table.columns == ["品番", "品名", "単価", "在庫数"]
    assert [row[0] for row in table.rows] == ["P-1", "P-2"]
    assert table.notes == ["注1 単価は税抜き。", "2026年4月改定。"]
    assert table.caption == "部品価格表\n（単位：円）"
    # The stated currency is the amounts' unit, not the count's.
    assert table.units == [None, None, "円", None]


def test_a_merged_header_is_spread_over_the_columns_it_spans():
    # Excel leaves a merged cell's other columns empty; Word repeats its text in them.
    for top in (["役職", "日当", "", "", "宿泊費", ""], ["役職", "日当", "日当", "日当", "宿泊費",
                                                    "宿泊費"]):
        table = read_table([top, ["", "A地域", "B地域", "C地域", "A地域", "B地域"],
                            ["部長", "3,000", "2,800", "2,500", "13,000", "12,000"]])
        assert table is not None
        assert table.columns == ["役職", "日当：A地域", "日当：B地域", "日当：C地域",
                                 "宿泊費：A地域", "宿泊費：B地域"]
        assert table.rows == [["部長", "3,000", "2,800", "2,500", "13,000", "12,000"]]


def test_a_header_row_a_sheet_took_for_a_caption_is_taken_back():
    # The top row of a two-row header is too sparse to look like a header on its own.
    table = read_table([["出張手当"], ["役職", "日当", "", "", "宿泊費", "", ""],
                        ["", "A地域", "B地域", "C地域", "A地域", "B地域", "C地域"],
                        ["部長", "1", "2", "3", "4", "5", "6"]], header_at=2)
    assert table is not None and table.caption == "出張手当"
    assert table.columns[:3] == ["役職", "日当：A地域", "日当：B地域"]


@pytest.mark.parametrize(("header", "unit"), [
    ("最大推力 (N)", "N"), ("定格吐出量 (L/min)", "L/min"), ("年間取引額(百万円)", "百万円"),
    ("金額（単位：千円）", "千円"), ("日当（1日あたり）", None), ("基本給（月額）", None),
])
def test_a_header_states_its_unit_in_parentheses(header, unit):
    assert unit_in(header) == unit


def test_text_without_a_data_row_or_a_second_column_is_no_table():
    assert read_table([["見出し"], ["本文"]]) is None
    assert read_table([["品番", "単価"], ["注1 なし"]]) is None


def test_a_workbook_keeps_its_sheet_as_a_table_with_values_as_shown():
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "価格表"
    sheet.append([None, "保守部品価格表"])
    sheet.append([None, "品番", "単価", "値引率"])
    sheet.append([None, "P-1", 39800, 0.05])
    sheet["C3"].number_format = "#,##0"
    sheet["D3"].number_format = "0%"
    parsed = parse_document("価格表.xlsx", _saved(workbook))
    [table] = parsed.tables
    assert (table.location, table.caption) == ("シート: 価格表", "保守部品価格表")
    assert table.columns == ["品番", "単価", "値引率"]
    assert table.rows == [["P-1", "39,800", "5%"]]
    assert "P-1 | 39,800 | 5%" in parsed.blocks[1].text


@pytest.mark.parametrize("encoding", ["utf-8-sig", "cp932"])
def test_a_csv_file_is_one_table_in_whatever_encoding_it_was_saved(encoding):
    data = "品番,品名,単価\nP-1,ギヤ,\"1,200\"\nP-2,シール,300\n".encode(encoding)
    parsed = parse_document("部品.csv", data)
    assert parsed.title == "部品" and parsed.mime == "text/csv"
    [table] = parsed.tables
    assert table.columns == ["品番", "品名", "単価"]
    assert table.rows == [["P-1", "ギヤ", "1,200"], ["P-2", "シール", "300"]]
    assert "P-1 | ギヤ | 1,200" in parsed.blocks[1].text


def test_a_csv_file_cut_by_semicolons_or_tabs_is_read_as_well():
    for name, data in (("a.csv", "品番;単価\nP-1;10\n"), ("a.tsv", "品番\t単価\nP-1\t10\n")):
        assert parse_document(name, data.encode()).tables[0].rows == [["P-1", "10"]]


def test_an_empty_csv_file_is_refused_precisely():
    with pytest.raises(ParseError, match="no non-empty cells"):
        parse_document("空.csv", b",,\n,,\n")


def test_markdown_keeps_its_table_and_the_notes_written_under_it():
    text = ("# 給与規程\n\n| 役職 | 月額 |\n|---|---|\n| 部長 | 80,000円 |\n| 課長 | 50,000円 |\n\n"
            "注1 管理職とは課長以上をいう。\n\n本文。\n")
    [table] = parse_document("給与規程.md", text.encode()).tables
    assert table.columns == ["役職", "月額"]
    assert table.rows == [["部長", "80,000円"], ["課長", "50,000円"]]
    assert table.notes == ["注1 管理職とは課長以上をいう。"]


def test_html_spans_are_laid_on_the_table_grid():
    html = ("<table><tr><th rowspan=2>役職</th><th colspan=2>日当</th></tr>"
            "<tr><th>A地域</th><th>B地域</th></tr>"
            "<tr><td>部長</td><td>3,000</td><td>2,800</td></tr></table>")
    [table] = parse_document("表.html", html.encode()).tables
    assert table.columns == ["役職", "日当：A地域", "日当：B地域"]
    assert table.rows == [["部長", "3,000", "2,800"]]


def test_word_and_powerpoint_tables_are_kept_as_cells():
    document = docx.Document()
    grid = document.add_table(rows=3, cols=3)
    grid.cell(0, 1).merge(grid.cell(0, 2)).text = "日当"
    grid.cell(0, 0).text = "役職"
    for col, text in enumerate(["", "A地域", "B地域"]):
        grid.cell(1, col).text = text
    for col, text in enumerate(["部長", "3,000", "2,800"]):
        grid.cell(2, col).text = text
    [table] = parse_document("規程.docx", _saved(document)).tables
    assert table.columns == ["役職", "日当：A地域", "日当：B地域"]

    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    shape = slide.shapes.add_table(2, 2, Inches(1), Inches(1), Inches(4), Inches(1))
    for (r, c), text in {(0, 0): "型式", (0, 1): "質量", (1, 0): "ZP-1", (1, 1): "1.8"}.items():
        shape.table.cell(r, c).text = text
    [table] = parse_document("紹介.pptx", _saved(presentation)).tables
    assert (table.location, table.columns, table.rows) == ("スライド 1", ["型式", "質量"],
                                                           [["ZP-1", "1.8"]])
