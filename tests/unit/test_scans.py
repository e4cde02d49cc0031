"""Generated scans (kb_eval.scan_set): the page mix, both writing directions' layout, the text kept.

They need a Japanese font: tests/ocr_needs.py.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest
from PIL import ImageFilter, ImageOps

from kb_eval import scan_set
from kb_eval.scan_set import FontMissingError, PageMix, render_pages
from tests.ocr_needs import need_font

SMALL_PAGE = (3.0, 4.0)  # inches: a few lines per page keeps the tests fast
TEXT = (
    "第1条（目的）\n"
    "この規程は、従業員が業務のために立て替えて支払った経費の精算について定める。\n"
    "\n"
    "第2条（申請）\n"
    "申請はZEN-Pay上で行い、所属長の承認を得なければならない。ただし、1万円未満のものは"
    "この限りでない。精算の期限は、支出の日から30日以内とする。\n"
) * 3


@pytest.fixture(autouse=True)
def _japanese_font() -> None:
    need_font()


def _ink_box(image) -> tuple[int, int, int, int]:
    """The box around the printed text; the median filter drops the scanner's specks."""
    ink = ImageOps.invert(image.convert("L").filter(ImageFilter.MedianFilter(3)))
    box = ink.point(lambda v: 255 if v > 128 else 0).getbbox()
    assert box is not None, "nothing was drawn"
    return box


def test_pages_together_print_the_whole_text() -> None:
    for vertical in (False, True):
        pages = render_pages(TEXT, vertical=vertical, dpi=100, page_size=SMALL_PAGE)
        assert len(pages) > 1
        printed = "".join(page.text for page in pages)
        assert re.sub(r"\s", "", printed) == re.sub(r"\s", "", TEXT)


def test_a_vertical_page_begins_in_the_top_right_column() -> None:
    image = render_pages("一二三四五", vertical=True, dpi=200, page_size=SMALL_PAGE)[0].image
    left, top, right, bottom = _ink_box(image)
    assert bottom - top > 3 * (right - left), "one column: taller than wide"
    assert left > image.width / 2 and bottom < image.height / 2


def test_a_vertical_page_fills_its_columns_right_to_left() -> None:
    page = render_pages("あ" * 40 + "\n" + "い", vertical=True, dpi=100, page_size=SMALL_PAGE)[0]
    first_column = render_pages("あ" * 40, vertical=True, dpi=100, page_size=SMALL_PAGE)[0]
    assert _ink_box(page.image)[0] < _ink_box(first_column.image)[0]


def test_a_horizontal_page_begins_at_the_top_left() -> None:
    image = render_pages("一二三四五", dpi=200, page_size=SMALL_PAGE)[0].image
    left, top, right, bottom = _ink_box(image)
    assert right - left > 3 * (bottom - top), "one line: wider than tall"
    assert right < image.width * 0.6 and bottom < image.height / 3


def test_a_turned_page_swaps_its_sides_and_skew_keeps_the_size() -> None:
    upright = render_pages("本文", dpi=100, page_size=SMALL_PAGE)[0].image
    turned = render_pages("本文", dpi=100, page_size=SMALL_PAGE, rotation=90)[0].image
    skewed = render_pages("本文", dpi=100, page_size=SMALL_PAGE, skew=2.5)[0].image
    assert turned.size == (upright.height, upright.width)
    assert skewed.size == upright.size


def test_the_same_seed_renders_the_same_pixels() -> None:
    first = render_pages(TEXT, dpi=100, page_size=SMALL_PAGE, jpeg_quality=60, seed=3)
    again = render_pages(TEXT, dpi=100, page_size=SMALL_PAGE, jpeg_quality=60, seed=3)
    assert [p.image.tobytes() for p in first] == [p.image.tobytes() for p in again]


def test_the_page_mix_keeps_its_shares() -> None:
    mix = PageMix(random.Random(44))
    types = [mix.next() for _ in range(300)]
    assert Counter(t.dpi for t in types) == {150: 100, 200: 100, 300: 100}
    assert sum(t.vertical for t in types) == 90
    assert sum(t.rotation != 0 for t in types) == 30
    assert {t.rotation for t in types} == {0, 90, 180, 270}
    assert all(-3 <= t.skew <= 3 and 50 <= (t.jpeg_quality or 0) <= 75 for t in types)


def test_a_missing_font_names_the_debian_package(tmp_path: Path) -> None:
    with pytest.raises(FontMissingError, match="fonts-noto-cjk"):
        render_pages(TEXT, font_files=[tmp_path / "none.ttc"])


def test_the_same_seed_writes_the_same_manifest(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "hr").mkdir(parents=True)
    (docs / "hr" / "_access.toml").write_text('groups = ["hr"]\n', encoding="utf-8")
    (docs / "hr" / "規程.md").write_text("# 規程\n\n第1条 目的を定める。\n", encoding="utf-8")
    (docs / "表.xlsx").write_bytes(b"not read")
    manifests = []
    for run in ("a", "b"):
        assert scan_set.main([str(tmp_path / run), "--samples", str(docs), "--seed", "7"]) == 0
        manifests.append((tmp_path / run / "manifest.jsonl").read_bytes())
    assert manifests[0] == manifests[1]
    lines = [json.loads(line) for line in manifests[0].splitlines()]
    assert {line["source"] for line in lines} == {"samples/hr/規程.md"}
    assert (tmp_path / "a" / "samples" / "hr" / "_access.toml").is_file()
    assert (tmp_path / "a" / lines[0]["scan"]).is_file()
    assert [line["text"] for line in lines] == ["規程\n第1条 目的を定める。\n"]
