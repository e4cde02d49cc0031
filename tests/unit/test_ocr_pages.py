"""Scanned pages without the engine: how a page is found to be set (direction, skew) on printed
pages, and how the engine's text becomes passages (spaces, wrapped lines, tables, pages).

The layout tests print pages with kb_eval.scan_set: tests/ocr_needs.py says what they need."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from kb_core.settings import OcrSettings
from kb_eval.scan_set import render_pages
from kb_pipeline.ocr import OcrResult, PageImage
from kb_pipeline.ocr.layout import page_layouts
from kb_pipeline.parsing import parse_document
from kb_pipeline.parsing.scans import page_lines
from tests.ocr_needs import need_font

TEXT = ("第2条（申請）\n年次有給休暇を取得しようとする者は、原則として五営業日前までに"
        "所定の申請書を所属長に提出しなければならない。ただし、やむを得ない事由がある場合は"
        "この限りでない。\n"
        "第3条（承認）\n所属長は、業務の正常な運営を妨げる場合を除き、申請を承認する。") * 2


@pytest.fixture(scope="module")
def font() -> None:
    need_font()


@pytest.mark.parametrize("vertical", [False, True])
@pytest.mark.parametrize("skew", [-2.5, 0.0, 1.75])
@pytest.mark.parametrize("size", [(8.27, 11.69), (4.13, 5.83)])
def test_direction_and_skew_are_found(font, vertical, skew, size):
    page = render_pages(TEXT, vertical=vertical, skew=skew, dpi=150, page_size=size)[0]
    [layout] = page_layouts(page.image)  # a page of text leaves no doubt
    assert layout.vertical is vertical
    assert layout.skew == pytest.approx(-skew, abs=0.5)  # the turn that straightens it


def test_a_short_line_goes_the_way_it_is_long(font):
    for vertical in (False, True):
        page = render_pages("一行だけの題名です", vertical=vertical, dpi=200,
                            page_size=(4.13, 5.83))[0]
        assert [layout.vertical for layout in page_layouts(page.image)] == [vertical]


def test_ocr_spaces_go_but_words_and_cells_stay():
    reading = OcrResult("第5条 (年次 有給休暇)\n\nABC Corp の 規程\n品名    単価    数量\n"
                        "ZP-2041    1,200円    3\n\f", 91.0, vertical=False, rotation=0)
    assert page_lines(reading) == [
        "第5条(年次有給休暇)", "", "ABC Corpの規程", "品名 | 単価 | 数量", "ZP-2041 | 1,200円 | 3"]


def test_a_gap_in_a_vertical_column_is_no_cell():
    reading = OcrResult("検品記録は   品質管理課が保管する。\n", 80.0, vertical=True, rotation=0)
    assert page_lines(reading) == ["検品記録は品質管理課が保管する。"]


def test_a_vertical_decimal_point_is_typed_as_a_point():
    # 縦書き prints 66.5 as 66・5; a middle dot between words stays one.
    reading = OcrResult("斤量は66・5kg、範囲は0･22ha。\nミナ・デル・カスティリョ\n", 80.0,
                        vertical=True, rotation=0)
    assert page_lines(reading) == ["斤量は66.5kg、範囲は0.22ha。", "ミナ・デル・カスティリョ"]
    across = OcrResult("1・2月の予定\n", 80.0, vertical=False, rotation=0)
    assert page_lines(across) == ["1・2月の予定"]  # in rows, a dot between digits lists them


class Readings:
    """A reader with the engine's text for each page already known."""

    limits = OcrSettings()

    def __init__(self, *texts: str) -> None:
        self.texts = texts
        self.asked: list[PageImage] = []

    def read(self, pages):
        self.asked = list(pages)
        return {page.number: OcrResult(self.texts[page.number - 1], 90.0, False, 0)
                for page in self.asked}


def tiff(pages: int) -> bytes:
    frames = [Image.new("L", (400, 560), 255) for _ in range(pages)]
    out = io.BytesIO()
    frames[0].save(out, format="TIFF", save_all=True, append_images=frames[1:], dpi=(200, 200))
    return out.getvalue()


def test_an_image_document_keeps_pages_wrapped_lines_and_tables():
    wide = "従業員は、年次有給休暇を取得しようとするときは、原則として取得希望日の"
    table = "品名   単価\nZP-2041   1,200円\nZP-2014   980円\n"
    reader = Readings(f"見積書\n{wide}\n五営業日前までに申請する。\n{table}", "")
    document = parse_document("見積.tiff", tiff(2), scans=reader)
    assert [page.number for page in reader.asked] == [1, 2]
    assert reader.asked[0].dpi == 200 and reader.asked[0].image.mode == "L"
    assert document.title == "見積書" and document.mime == "image/tiff"
    assert [(b.kind, b.location, b.text) for b in document.blocks] == [
        ("paragraph", "p.1", f"見積書\n{wide}五営業日前までに申請する。"),
        ("table", "p.1", "品名 | 単価\nZP-2041 | 1,200円\nZP-2014 | 980円"),
    ]
    assert document.ocr_locations == ["p.1"]  # the blank second page holds no passage
