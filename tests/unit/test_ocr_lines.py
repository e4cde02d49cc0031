"""A page's text from Tesseract's layout and PP-OCR's characters (kb_pipeline.ocr.lines), and
the recognizer's real model reading printed lines (kb_pipeline.ocr.recognizer), as its
provenance records it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from kb_eval.scan_set import find_cjk_font
from kb_pipeline.catalogue import file_checksum
from kb_pipeline.ocr.engine import OcrError, _Deadline, _LineRecognizer
from kb_pipeline.ocr.lines import layout_lines, merged, page_text
from kb_pipeline.ocr.recognizer import LINE_MODEL, read_lines
from kb_pipeline.ocr.vendor_line_model import FILES, PROVENANCE
from tests.ocr_needs import need_font

BLANK = Image.new("L", (1000, 1000), 255)
_HEADER = ("level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight"
           "\tconf\ttext")


def _tsv(*words: tuple[int, int, int, int, int, int, int, str]) -> str:
    """Tesseract's TSV with a line-level row (ignored) and a word row for each word:
    (block, paragraph, line, left, top, width, height, text)."""
    rows = [_HEADER, "4\t1\t1\t1\t1\t0\t0\t0\t900\t40\t-1\t"]
    for word, (block, par, line, left, top, width, height, text) in enumerate(words, 1):
        rows.append(f"5\t1\t{block}\t{par}\t{line}\t{word}\t{left}\t{top}\t{width}\t{height}"
                    f"\t90\t{text}")
    return "\n".join(rows)


def test_a_row_is_read_in_cells_split_at_wide_gaps():
    tsv = _tsv((1, 1, 1, 10, 80, 90, 40, "品名"), (1, 1, 1, 300, 80, 90, 40, "単価"),
               (1, 1, 2, 10, 130, 90, 40, "ZP-2041"), (1, 1, 2, 105, 130, 40, 40, "A"),
               (1, 1, 2, 300, 132, 90, 38, "1,200円"))
    lines = layout_lines(tsv, vertical=False, page=BLANK)
    assert [[s.box for s in line.segments] for line in lines] == [
        [(10, 80, 90, 40), (300, 80, 90, 40)],
        # A word space (5 px here) keeps words in one cell; the 155 px gap ends it.
        [(10, 130, 135, 40), (300, 132, 90, 38)]]
    # Where the recognizer reads nothing, Tesseract's own reading stands.
    assert page_text(lines, ["品名", "単価", "ZP-2041 A", ""], vertical=False) == (
        "品名   単価\nZP-2041 A   1,200円\n")
    # Characters Tesseract found no word in fill the gap: no cells there, one stretch is read.
    inked = BLANK.copy()
    ImageDraw.Draw(inked).rectangle((150, 85, 250, 115), fill=0)
    assert [[s.box for s in line.segments] for line in layout_lines(tsv, False, inked)][0] == [
        (10, 80, 380, 40)]


def test_paragraphs_are_where_lines_stand_further_apart():
    # Tesseract makes each of these widely spaced lines a paragraph of its own (par 1, 2, 3):
    # they are one, and the fourth line, set apart, begins the next.
    tsv = _tsv((1, 1, 1, 10, 10, 900, 40, "一"), (1, 2, 1, 10, 85, 900, 40, "二"),
               (1, 3, 1, 10, 160, 900, 40, "三"), (1, 4, 1, 10, 300, 900, 40, "四"))
    assert page_text(layout_lines(tsv, vertical=False, page=BLANK), ["一", "二", "三", "四"],
                     vertical=False) == "一\n二\n三\n\n四\n"
    # Columns, right to left, the same way.
    tsv = _tsv((1, 1, 1, 900, 10, 40, 900, "一"), (1, 2, 1, 830, 10, 40, 900, "二"),
               (1, 3, 1, 650, 10, 40, 900, "三"))
    assert page_text(layout_lines(tsv, vertical=True, page=BLANK), ["一", "二", "三"],
                     vertical=True) == "一\n二\n\n三\n"


def test_a_column_is_read_whole():
    tsv = _tsv((1, 1, 1, 800, 10, 40, 300, "就業"), (1, 1, 1, 800, 320, 40, 200, "規則"),
               (1, 1, 2, 740, 10, 40, 500, "第八条"))
    lines = layout_lines(tsv, vertical=True, page=BLANK)
    assert [[(s.box, s.tesseract) for s in line.segments] for line in lines] == [
        [((800, 10, 40, 510), "就業 規則")], [((740, 10, 40, 500), "第八条")]]
    assert page_text(lines, ["就業規則", "第八条"], vertical=True) == "就業規則\n第八条\n"


def test_a_column_takes_the_recognizers_characters_and_tesseracts_marks():
    # The recognizer reads 漫 where Tesseract saw 湯, and drops the long-vowel mark and the
    # full stop a column sets apart; Tesseract's pieces come with spaces between them.
    assert merged("サッ カー 湯 画 。", "サッカ漫画") == "サッカー漫画。"
    # Characters only the recognizer read are taken, as are its readings where they differ.
    assert merged("有給休暇", "年次有給休暇") == "年次有給休暇"
    assert merged("申請書を堤出", "申請書を提出") == "申請書を提出"


@pytest.fixture(scope="module")
def font() -> ImageFont.FreeTypeFont:
    need_font()
    path, index = find_cjk_font()
    return ImageFont.truetype(str(path), 40, index=index)


ROW = "年次有給休暇は五営業日前までに申請する。"
COLUMN = "就業規則第八条"
BOXES = [(20, 20, 40 * len(ROW), 48, False), (1100, 100, 44, 48 * len(COLUMN), True)]


@pytest.fixture(scope="module")
def printed(font) -> Image.Image:
    """ROW and COLUMN printed where BOXES say."""
    page = Image.new("L", (1200, 600), 255)
    draw = ImageDraw.Draw(page)
    draw.text((20, 20), ROW, font=font, fill=0)
    for i, char in enumerate(COLUMN):  # 縦書き: one character under another
        draw.text((1100, 100 + 48 * i), char, font=font, fill=0)
    return page


def test_the_recognizer_reads_a_printed_row_and_column(printed):
    assert [text for text, _ in read_lines(printed, BOXES)] == [ROW, COLUMN]
    assert all(confidence > 0.9 for _, confidence in read_lines(printed, BOXES))


def test_one_recognizer_process_reads_page_after_page_and_one_that_fails_is_replaced(
        printed, tmp_path):
    page = tmp_path / "page.png"
    printed.save(page)
    recognizer = _LineRecognizer()
    boxes = [[*box] for box in BOXES]
    read = [text for text, _ in recognizer.read(page, boxes, _Deadline(60))]
    first = recognizer._child.pid
    assert read == [ROW, COLUMN]
    assert [text for text, _ in recognizer.read(page, boxes[:1], _Deadline(60))] == [ROW]
    assert recognizer._child.pid == first, "the model is loaded once, not for every page"
    with pytest.raises(OcrError, match="reading the page took over"):
        recognizer.read(page, boxes, _Deadline(0))  # its time gone before it was sent
    assert [text for text, _ in recognizer.read(page, boxes[:1], _Deadline(60))] == [ROW], \
        "no answer to an earlier page is left for the next"

    with pytest.raises(OcrError, match=r"reading the page took over 0\.001 s"):
        recognizer.read(page, boxes, _Deadline(0.001))
    with pytest.raises(OcrError, match=r"the line recognizer failed: .*No such file"):
        recognizer.read(Path(tmp_path / "gone.png"), boxes, _Deadline(60))
    assert [text for text, _ in recognizer.read(page, boxes, _Deadline(60))] == [ROW, COLUMN]
    assert recognizer._child.pid != first


def test_the_recognizers_files_are_those_their_provenance_records():
    recorded = dict(re.findall(r"^\| `([^`]+)` \| `[^`]+` \| `([0-9a-f]{64})` \|$",
                               (LINE_MODEL / PROVENANCE).read_text(encoding="utf-8"),
                               re.MULTILINE))
    assert set(recorded) == set(FILES)
    assert {name: file_checksum(LINE_MODEL / name) for name in FILES} == recorded
