"""Parsing of every supported format into ParsedDocument, with fixtures generated at run time."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import random
import zipfile
from pathlib import Path

import docx
import openpyxl
import pptx
import pytest
from docx.enum.style import WD_STYLE_TYPE
from pptx.util import Inches
from pypdf import PdfReader, PdfWriter

from kb_pipeline.parsing import (
    PARSER_VERSION,
    SUPPORTED_SUFFIXES,
    Block,
    ParsedDocument,
    ParseError,
    find_revision_date,
    parse_document,
    sheets,
)
from kb_pipeline.parsing import xlsx as xlsx_parser
from kb_pipeline.parsing.wrapped import join_wrapped_lines

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "docs"

REGULATION = """経費精算規程

第１章　総則
（目的）
第1条　この規程は、従業員が業務のために立て替えた経費の精算手続を定める。
２　前項の規定にかかわらず、役員については別に定める。
第2節 締め日
第3条（締め日）
経費精算の締め日は毎月末日とする。
第3条の規定により処理する。
第二十二条（罰則）
違反した者は懲戒処分とする。
附則
この規程は、令和6年4月1日から施行する。
"""


def headings(document: ParsedDocument) -> list[tuple[int, str]]:
    return [(block.level, block.text) for block in document.blocks if block.kind == "heading"]


def blocks_of(document: ParsedDocument, kind: str) -> list[Block]:
    return [block for block in document.blocks if block.kind == kind]


def all_text(document: ParsedDocument) -> str:
    return "\n".join(block.text for block in document.blocks)


# --- the entry point -------------------------------------------------------------------------


def test_supported_suffixes_and_parser_version_are_published() -> None:
    expected = {".md", ".markdown", ".txt", ".html", ".htm", ".pdf", ".docx", ".xlsx", ".pptx",
                ".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp", ".bmp", ".csv", ".tsv"}
    assert expected == SUPPORTED_SUFFIXES
    assert isinstance(PARSER_VERSION, str) and PARSER_VERSION


def test_unsupported_suffix_is_rejected_by_name() -> None:
    with pytest.raises(ParseError, match=r"unsupported file type '\.exe'"):
        parse_document("setup.exe", b"MZ\x90\x00")


def test_empty_file_is_rejected() -> None:
    with pytest.raises(ParseError, match="file is empty"):
        parse_document("空.md", b"")


def test_whitespace_only_file_has_no_text() -> None:
    with pytest.raises(ParseError, match="no text"):
        parse_document("blank.txt", b" \n\t\n")


def test_suffix_chooses_the_parser_case_insensitively() -> None:
    document = parse_document("dir/README.MD", b"# Title\n\nBody")
    assert document.mime == "text/markdown"
    assert document.title == "Title"


# --- text decoding ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["cp932", "shift_jis", "euc_jp", "utf-8", "utf-8-sig", "utf-16"])
def test_japanese_text_decodes_without_any_declaration(codec: str) -> None:
    document = parse_document("規程.txt", REGULATION.encode(codec))
    assert document.title == "経費精算規程"
    assert "立て替えた経費の精算手続" in all_text(document)
    assert not all_text(document).startswith("\ufeff")


def test_short_euc_jp_text_is_not_mistaken_for_shift_jis() -> None:
    document = parse_document("memo.txt", "出張の申請は所属長の承認を得ること。".encode("euc_jp"))
    assert all_text(document) == "出張の申請は所属長の承認を得ること。"


def test_crlf_and_cr_line_ends_become_lf() -> None:
    document = parse_document("a.txt", "一行目\r\n二行目\r三行目\r\n\r\n次の段落".encode())
    assert [block.text for block in document.blocks] == ["一行目\n二行目\n三行目", "次の段落"]


def test_trailing_whitespace_is_stripped_but_text_is_not_nfkc_normalized() -> None:
    document = parse_document("a.txt", "ＡＢＣ１２３　ｶﾀｶﾅ   \t\n".encode())
    assert all_text(document) == "ＡＢＣ１２３　ｶﾀｶﾅ"


def test_nul_bytes_under_a_text_extension_are_rejected_with_their_offset() -> None:
    with pytest.raises(ParseError, match=r"binary data under a text extension \(\.md\): NUL .* 5"):
        parse_document("image.md", b"hello\x00\x01\x02")


def test_mostly_control_characters_are_rejected_as_binary() -> None:
    with pytest.raises(ParseError, match=r"binary data under a text extension \(\.txt\)"):
        parse_document("x.txt", bytes([1, 2, 3, 4, 5, 6, 7, 65]) * 20)


def test_stray_control_characters_are_dropped_and_form_feeds_break_lines() -> None:
    document = parse_document("x.txt", b"abc\x1a\n\x0cdef\x1b")
    assert [block.text for block in document.blocks] == ["abc", "def"]


def test_broken_utf8_is_reported_instead_of_decoded_as_mojibake() -> None:
    data = "経費精算規程".encode() + b"\xe3\x81" + "締め日は末日".encode()
    with pytest.raises(ParseError, match="not valid UTF-8.*offset 18"):
        parse_document("a.txt", data)


def test_utf8_encoded_lone_surrogate_is_rejected() -> None:
    with pytest.raises(ParseError, match="not valid UTF-8"):
        parse_document("a.md", b"abc \xed\xa0\x80 def")


def test_utf16_with_lone_surrogate_is_rejected() -> None:
    with pytest.raises(ParseError, match="not valid UTF-16"):
        parse_document("a.txt", b"\xff\xfe" + "ab".encode("utf-16-le") + b"\x00\xd8")


def test_bytes_valid_in_no_japanese_encoding_are_rejected() -> None:
    with pytest.raises(ParseError, match="not valid UTF-8, Shift_JIS/CP932 or EUC-JP"):
        parse_document("a.txt", b"abc \xff\xff\xff")


# --- Markdown --------------------------------------------------------------------------------


def test_markdown_headings_tables_and_paragraphs_keep_their_structure() -> None:
    source = """---
title: ignored
tags: [hr]
---
# 就業規則

株式会社ゼニス精機
制定日：2008年4月1日

## 第1章 総則 ##

### 第3条（締め日）

| 項目 | 上限 |
|:-----|-----:|
| 宿泊 | 10,000円 |
| 日当 | 2\\|000円 |

```
# not a heading
```

設定
---
"""
    document = parse_document("就業規則.md", source.encode())
    assert document.title == "就業規則"
    assert headings(document) == [
        (1, "就業規則"),
        (2, "第1章 総則"),
        (3, "第3条（締め日）"),
        (2, "設定"),
    ]
    assert blocks_of(document, "table") == [
        Block("table", "項目 | 上限\n宿泊 | 10,000円\n日当 | 2|000円")
    ]
    paragraphs = [block.text for block in blocks_of(document, "paragraph")]
    assert paragraphs == ["株式会社ゼニス精機\n制定日：2008年4月1日", "# not a heading"]
    assert "ignored" not in all_text(document)


def test_markdown_list_above_dashes_and_html_comments_are_not_headings() -> None:
    document = parse_document("a.md", b"- one\n- two\n---\n<!-- draft\nnote -->\nend")
    assert [(b.kind, b.text) for b in document.blocks] == [
        ("paragraph", "- one\n- two"),
        ("paragraph", "end"),
    ]


def test_markdown_title_falls_back_to_the_file_stem() -> None:
    assert parse_document("notes/議事メモ.md", b"## Agenda\n\ntext").title == "議事メモ"


# --- plain text ------------------------------------------------------------------------------


def test_plain_text_articles_chapters_and_sections_become_headings() -> None:
    document = parse_document("経費精算規程.txt", REGULATION.encode())
    assert headings(document) == [
        (1, "第１章　総則"),
        (3, "第1条（目的）"),
        (2, "第2節 締め日"),
        (3, "第3条（締め日）"),
        (3, "第二十二条（罰則）"),
        (1, "附則"),
    ]
    paragraphs = [block.text for block in blocks_of(document, "paragraph")]
    # The article's text that shared its heading line becomes the paragraph under it.
    assert "この規程は、従業員が業務のために立て替えた経費の精算手続を定める。\n２" in paragraphs[1]
    # A reference to an article is not a heading.
    assert "経費精算の締め日は毎月末日とする。\n第3条の規定により処理する。" in paragraphs
    assert document.revision_date == dt.date(2024, 4, 1)  # 附則: 令和6年4月1日から施行


def test_plain_text_numbered_headings_nest_below_chapters() -> None:
    text = (
        "手引き\n\n1. 目的\n本書の目的。\n１．範囲\n1.1 対象者\n(1) 正社員\n（２）契約社員\n"
        "1.5倍の手当を支給する。\n"
    )
    document = parse_document("手引き.txt", text.encode())
    assert headings(document) == [
        (1, "1. 目的"),
        (1, "１．範囲"),
        (2, "1.1 対象者"),
        (2, "(1) 正社員"),
        (2, "（２）契約社員"),
    ]
    assert "1.5倍の手当を支給する。" in all_text(document)


def test_plain_text_title_is_a_short_first_line_else_the_stem() -> None:
    assert parse_document(
        "a.txt", "━━━━━━\n　情報セキュリティ規程\n━━━━━━\n本文".encode()
    ).title == ("情報セキュリティ規程")
    long_line = "この文書は" + "とても" * 30 + "長い一行目で始まる。"
    assert parse_document("長文.txt", long_line.encode()).title == "長文"


# --- HTML ------------------------------------------------------------------------------------


def test_html_headings_tables_and_paragraphs_without_scripts_or_head() -> None:
    page = """<!DOCTYPE html><html><head><title>製品保証規定</title>
<style>p { color: red }</style><script>var hidden = 1;</script></head>
<body><h1>製品保証<b>規定</b></h1><!-- a comment -->
<p>保証期間は、
納品日から1年間とする。<br>ただし消耗品を除く。</p>
<ul><li>ポンプ</li><li>アクチュエータ</li></ul>
<noscript>enable js</noscript><template><p>template text</p></template>
<table><tr><th>型式</th><th>保証期間</th></tr><tr><td>ZP-2041</td><td>1年</td></tr></table>
<h3>第2条（対象外）</h3><div>改造品は対象外。</div></body></html>"""
    document = parse_document("保証.html", page.encode())
    assert document.title == "製品保証規定"
    assert document.mime == "text/html"
    assert headings(document) == [(1, "製品保証規定"), (3, "第2条（対象外）")]
    assert blocks_of(document, "table") == [Block("table", "型式 | 保証期間\nZP-2041 | 1年")]
    paragraphs = [block.text for block in blocks_of(document, "paragraph")]
    # A source line break inside Japanese text adds no space; <br> keeps a line break.
    assert paragraphs == [
        "保証期間は、納品日から1年間とする。\nただし消耗品を除く。",
        "ポンプ",
        "アクチュエータ",
        "改造品は対象外。",
    ]
    text = all_text(document)
    assert "hidden" not in text and "color" not in text and "comment" not in text
    assert "enable js" not in text and "template text" not in text


def test_html_meta_charset_is_honoured() -> None:
    page = '<html><head><meta charset="Shift_JIS"><title>規程</title></head><body><p>ｶﾀｶﾅ①㈱</p>'
    document = parse_document("page.htm", page.encode("cp932"))
    assert all_text(document) == "ｶﾀｶﾅ①㈱"


def test_html_http_equiv_charset_is_honoured() -> None:
    page = (
        '<meta http-equiv="Content-Type" content="text/html; charset=EUC-JP">'
        "<p>日本語の本文です。</p>"
    )
    assert all_text(parse_document("page.html", page.encode("euc_jp"))) == "日本語の本文です。"


def test_html_layout_tables_are_read_as_page_content() -> None:
    page = "<table><tr><td><h2>お知らせ</h2><p>本文です。</p></td></tr></table>"
    document = parse_document("old.html", page.encode())
    assert headings(document) == [(2, "お知らせ")]
    assert blocks_of(document, "table") == []


def test_deeply_nested_html_parses_without_recursion_error() -> None:
    depth = 50_000
    page = b"<div>" * depth + "深い本文".encode() + b"</div>" * depth
    assert all_text(parse_document("deep.html", page)) == "深い本文"


# --- PDF -------------------------------------------------------------------------------------


def make_pdf(pages: list[list[str]], title: str | None = None) -> bytes:
    """Return a PDF whose pages hold `pages` lines, with a Unicode text layer for any script.

    The font is a CID font with Identity-H and a ToUnicode map, the way Japanese PDFs carry
    their text; no glyphs are embedded, as only the text layer matters here.
    """
    cids = {ch: i + 1 for i, ch in enumerate(sorted({ch for p in pages for ln in p for ch in ln}))}
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    def stream(content: bytes) -> bytes:
        return b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content)

    mappings = b"".join(
        b"<%04X> <%s>\n" % (cid, ch.encode("utf-16-be").hex().upper().encode())
        for ch, cid in cids.items()
    )
    cmap = (
        b"/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n"
        b"/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
        b"/CMapName /Adobe-Identity-UCS def\n/CMapType 2 def\n"
        b"1 begincodespacerange\n<0000> <FFFF>\nendcodespacerange\n"
        b"%d beginbfchar\n%sendbfchar\nendcmap\n"
        b"CMapName currentdict /CMap defineresource pop\nend\nend" % (len(cids), mappings)
    )
    catalog, page_tree = add(b""), add(b"")
    to_unicode = add(stream(cmap))
    cid_font = add(
        b"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /TestFont /DW 1000 "
        b"/CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> >>"
    )
    font = add(
        b"<< /Type /Font /Subtype /Type0 /BaseFont /TestFont /Encoding /Identity-H "
        b"/DescendantFonts [%d 0 R] /ToUnicode %d 0 R >>" % (cid_font, to_unicode)
    )
    kids = []
    for lines in pages:
        shown = [
            b"<%s> Tj T*" % "".join(f"{cids[ch]:04X}" for ch in line).encode() for line in lines
        ]
        content = add(stream(b"\n".join([b"BT /F1 10 Tf 14 TL 40 800 Td", *shown, b"ET"])))
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] "
                b"/Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>"
                % (page_tree, font, content)
            )
        )
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % page_tree
    objects[page_tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % kid for kid in kids),
        len(kids),
    )
    info = b""
    if title is not None:
        info = b" /Info %d 0 R" % add(
            b"<< /Title <FEFF%s> >>" % title.encode("utf-16-be").hex().encode()
        )
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R%s >>\n" % (len(objects) + 1, catalog, info)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


RULES_PDF_PAGES = [
    [
        "経費精算規程 社外秘",
        "経費精算規程",
        "第1章 総則",
        "第1条（目的）",
        "この規程は、従業員が業務のために立て替えた経費の精",
        "算手続を定める。",
        "Employees must submit their receipts within the",
        "thirty days after the trip ends.",
        "- 1 -",
    ],
    [
        "経費精算規程 社外秘",
        "第2条（締め日）",
        "締め日は毎月末日とし、翌月5営業日までに申請しなけ",
        "ればならない。",
        "改定日：2025年4月1日",
        "- 2 -",
    ],
]


def test_pdf_pages_headings_and_wrapped_lines_are_recovered() -> None:
    document = parse_document("rules.pdf", make_pdf(RULES_PDF_PAGES, title="経費精算規程"))
    assert document.mime == "application/pdf"
    assert document.title == "経費精算規程"
    assert document.revision_date == dt.date(2025, 4, 1)
    assert [(b.kind, b.location, b.text) for b in document.blocks] == [
        ("paragraph", "p.1", "経費精算規程"),
        ("heading", "p.1", "第1章 総則"),
        ("heading", "p.1", "第1条（目的）"),
        (
            "paragraph",
            "p.1",
            "この規程は、従業員が業務のために立て替えた経費の精算手続を定める。\n"
            "Employees must submit their receipts within the thirty days after the trip ends.",
        ),
        ("heading", "p.2", "第2条（締め日）"),
        (
            "paragraph",
            "p.2",
            "締め日は毎月末日とし、翌月5営業日までに申請しなければならない。\n改定日：2025年4月1日",
        ),
    ]


def test_pdf_title_falls_back_to_the_first_line_when_metadata_is_a_file_name() -> None:
    data = make_pdf([["出張旅費規程", "本文です。"]], title="Microsoft Word - 出張旅費規程.docx")
    assert parse_document("x.pdf", data).title == "出張旅費規程"


def encrypt(data: bytes, user_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_password_protected_pdf_is_rejected_as_encrypted() -> None:
    data = encrypt(make_pdf([["秘密の文書です。"]]), user_password="secret")
    with pytest.raises(ParseError, match="PDF is encrypted"):
        parse_document("secret.pdf", data)


def test_pdf_encrypted_with_an_empty_user_password_is_parsed() -> None:
    data = encrypt(make_pdf([["印刷のみ制限された文書です。"]]), user_password="")
    assert all_text(parse_document("restricted.pdf", data)) == "印刷のみ制限された文書です。"


def test_truncated_pdf_is_rejected() -> None:
    data = make_pdf(RULES_PDF_PAGES)
    with pytest.raises(ParseError, match="truncated"):
        parse_document("cut.pdf", data[: len(data) // 2])


def test_blank_pdf_is_rejected_with_its_page_count() -> None:
    writer = PdfWriter()
    for _ in range(3):
        writer.add_blank_page(width=595, height=842)
    out = io.BytesIO()
    writer.write(out)
    message = "PDF has no text: 3 pages, without a text layer or an image to read"
    with pytest.raises(ParseError, match=message):
        parse_document("scan.pdf", out.getvalue())


def test_file_without_pdf_header_is_rejected() -> None:
    with pytest.raises(ParseError, match="not a PDF file"):
        parse_document("fake.pdf", b"<html>not a pdf</html>")


def test_wrapped_japanese_lines_join_without_a_space() -> None:
    lines = [
        "従業員は、出張の前に所属長の承認を得て、経費精算シス",
        "テムで申請しなければならない。",
    ]
    assert join_wrapped_lines(lines) == [
        "従業員は、出張の前に所属長の承認を得て、経費精算システムで申請しなければならない。"
    ]


def test_wrapped_latin_words_join_with_a_space() -> None:
    lines = ["Expenses must be claimed within thirty", "days of the trip."]
    assert join_wrapped_lines(lines) == ["Expenses must be claimed within thirty days of the trip."]


@pytest.mark.parametrize(
    "lines",
    [
        ["第一文は、ここで終わる文章です。", "次の文は新しい行から始まる。"],
        ["この条文の本文は、ここで改行されるが、", "第3条（締め日）"],
        ["経費の精算に関する規程", "この規程は、経費の精算手続を定めるものです。以上。"],
        ["持参するものは次のとおりとする。持参物は", "・社員証"],
    ],
    ids=["sentence-end", "heading-next", "short-title-line", "list-item-next"],
)
def test_lines_that_were_not_wrapped_stay_apart(lines: list[str]) -> None:
    assert join_wrapped_lines(lines) == lines


# --- DOCX ------------------------------------------------------------------------------------


def save(document: object) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_docx_headings_paragraphs_and_tables_stay_in_body_order() -> None:
    document = docx.Document()
    document.core_properties.title = "経費精算規程"
    document.add_heading("経費精算規程", level=0)
    document.add_heading("第1章 総則", level=1)
    document.add_paragraph("この規程は経費の精算手続を定める。")
    table = document.add_table(rows=3, cols=3)
    for row, values in zip(
        table.rows,
        [["費目", "上限", "備考"], ["宿泊", "10,000円", ""], ["日当", "2,000円", "国内"]],
        strict=True,
    ):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    table.cell(0, 1).merge(table.cell(0, 2)).text = "上限・備考"
    document.add_heading("第2章 手続", level=2)
    document.add_paragraph("改定日：2025年4月1日")
    parsed = parse_document("経費精算規程.docx", save(document))
    assert parsed.title == "経費精算規程"
    assert [(b.kind, b.level, b.text) for b in parsed.blocks] == [
        ("heading", 1, "経費精算規程"),
        ("heading", 1, "第1章 総則"),
        ("paragraph", 0, "この規程は経費の精算手続を定める。"),
        ("table", 0, "費目 | 上限・備考\n宿泊 | 10,000円\n日当 | 2,000円 | 国内"),
        ("heading", 2, "第2章 手続"),
        ("paragraph", 0, "改定日：2025年4月1日"),
    ]
    assert parsed.revision_date == dt.date(2025, 4, 1)


def test_docx_japanese_heading_styles_and_article_lines_are_headings() -> None:
    document = docx.Document()
    document.styles.add_style("見出し 2", WD_STYLE_TYPE.PARAGRAPH)
    document.add_paragraph("第2章 服務", style="見出し 2")
    document.add_paragraph("（遵守事項）")
    document.add_paragraph("第12条　従業員は、次の事項を守らなければならない。")
    parsed = parse_document("就業規則.docx", save(document))
    assert headings(parsed) == [(2, "第2章 服務"), (3, "第12条（遵守事項）")]
    assert parsed.title == "第2章 服務"
    assert blocks_of(parsed, "paragraph") == [
        Block("paragraph", "従業員は、次の事項を守らなければならない。")
    ]


def test_zip_that_is_not_a_docx_is_rejected() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("readme.txt", "just a zip")
    with pytest.raises(ParseError, match=r"not a valid DOCX file: .*\[Content_Types\]\.xml"):
        parse_document("renamed.docx", out.getvalue())


def test_non_zip_bytes_under_docx_are_rejected() -> None:
    with pytest.raises(ParseError, match=r"not a valid DOCX \(ZIP\) file: File is not a zip file"):
        parse_document("broken.docx", b"this is plain text, not a document")


def test_legacy_or_password_protected_office_file_is_named_as_such() -> None:
    ole2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)
    with pytest.raises(ParseError, match="OLE2 compound file.*password-protected"):
        parse_document("old.xlsx", ole2)


def test_workbook_renamed_to_docx_is_rejected() -> None:
    with pytest.raises(ParseError, match="no DOCX main part"):
        parse_document("book.docx", save(openpyxl.Workbook()))


# --- XLSX ------------------------------------------------------------------------------------


def test_xlsx_sheets_become_headings_and_row_tables() -> None:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "別表1"
    sheet.append([None, "役職", "日当", "改定日"])
    sheet.append([None, "部長", 3000.0, dt.datetime(2026, 4, 1)])
    sheet.append([None, "一般", 2000, None])
    sheet.append([])
    sheet.append([None, "備考\n改行あり", None, None])
    workbook.create_sheet("空のシート")
    workbook.create_sheet("別表2").append(["地域", "加算額"])
    parsed = parse_document("別表.xlsx", save(workbook))
    assert parsed.title == "別表"
    assert [(b.kind, b.location, b.text) for b in parsed.blocks] == [
        ("heading", "シート: 別表1", "別表1"),
        (
            "table",
            "シート: 別表1",
            "役職 | 日当 | 改定日\n部長 | 3000 | 2026-04-01\n一般 | 2000\n備考改行あり",
        ),
        ("heading", "シート: 別表2", "別表2"),
        ("table", "シート: 別表2", "地域 | 加算額"),
    ]
    assert all(b.level == 1 for b in parsed.blocks if b.kind == "heading")


def test_big_sheet_is_split_into_blocks_that_each_repeat_the_header() -> None:
    workbook = openpyxl.Workbook()
    workbook.active.append(["製品仕様一覧　ZPシリーズ"])  # a title row above the header
    workbook.active.append(["型式", "吐出量"])
    for n in range(100):
        workbook.active.append([f"ZP-{n:04d}", n])
    tables = [
        t.text.split("\n") for t in blocks_of(parse_document("仕様.xlsx", save(workbook)), "table")
    ]
    assert len(tables) == 3
    assert tables[0][:2] == ["製品仕様一覧　ZPシリーズ", "型式 | 吐出量"]
    assert [t[0] for t in tables[1:]] == ["型式 | 吐出量", "型式 | 吐出量"]
    assert all(len(t) <= sheets.ROWS_PER_BLOCK for t in tables)
    rows = tables[0][2:] + tables[1][1:] + tables[2][1:]
    assert rows == [f"ZP-{n:04d} | {n}" for n in range(100)]


def test_workbook_over_the_cell_limit_fails_precisely(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xlsx_parser, "MAX_CELLS", 50)
    workbook = openpyxl.Workbook()
    for n in range(30):
        workbook.active.append([n, n, n])
    with pytest.raises(ParseError, match="workbook too large: more than 50 cells .* at row 17"):
        parse_document("big.xlsx", save(workbook))


def test_workbook_without_values_is_rejected() -> None:
    with pytest.raises(ParseError, match="no non-empty cells"):
        parse_document("empty.xlsx", save(openpyxl.Workbook()))


# --- PPTX ------------------------------------------------------------------------------------


def test_pptx_slides_give_titles_text_tables_and_notes_by_slide() -> None:
    presentation = pptx.Presentation()
    title_slide = presentation.slides.add_slide(presentation.slide_layouts[0])
    title_slide.shapes.title.text = "新入社員研修"
    title_slide.placeholders[1].text = "人事部"
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])  # title only
    slide.shapes.title.text = "製品紹介"
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(4), Inches(6), Inches(1)).table
    for (row, col), value in {
        (0, 0): "型式",
        (0, 1): "用途",
        (1, 0): "ZP-2041",
        (1, 1): "薬液",
    }.items():
        table.cell(row, col).text = value
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(1))
    box.text_frame.text = "主力製品です。"
    box.text_frame.add_paragraph().text = "2行目"
    slide.notes_slide.notes_text_frame.text = "ここで実物を見せる。"
    parsed = parse_document("研修.pptx", save(presentation))
    assert parsed.title == "新入社員研修"
    assert [(b.kind, b.level, b.location, b.text) for b in parsed.blocks] == [
        ("heading", 2, "スライド 1", "新入社員研修"),
        ("paragraph", 0, "スライド 1", "人事部"),
        ("heading", 2, "スライド 2", "製品紹介"),
        ("paragraph", 0, "スライド 2", "主力製品です。\n2行目"),
        ("table", 0, "スライド 2", "型式 | 用途\nZP-2041 | 薬液"),
        ("paragraph", 0, "スライド 2", "ここで実物を見せる。"),
    ]


# --- revision dates --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("改定日：2025年10月1日", dt.date(2025, 10, 1)),
        ("改訂日 2025/10/01", dt.date(2025, 10, 1)),
        ("施行日: 2025-10-01", dt.date(2025, 10, 1)),
        ("制定日：２０２５年１０月１日", dt.date(2025, 10, 1)),
        ("最終改定 令和6年4月1日", dt.date(2024, 4, 1)),
        ("改定日：令和元年5月1日", dt.date(2019, 5, 1)),
        ("改定日：平成31年4月30日", dt.date(2019, 4, 30)),
        ("施行日　令和六年四月一日", dt.date(2024, 4, 1)),
        ("この規程は、令和7年4月1日から施行する。", dt.date(2025, 4, 1)),
        ("2024/04/01 | 改定 | 第3条を変更", dt.date(2024, 4, 1)),
        ("改定日 | 2023年4月1日", dt.date(2023, 4, 1)),
        ("本日は2025年1月1日です。", None),
        ("改定日：2025年13月1日", None),
    ],
)
def test_revision_date_forms(text: str, expected: dt.date | None) -> None:
    assert find_revision_date(text) == expected


def test_latest_revision_beats_enforcement_and_enactment() -> None:
    text = "制定日：2030年1月1日\n施行日：2029年1月1日\n改定日：2020年4月1日\n改定日：2024年10月1日"
    assert find_revision_date(text) == dt.date(2024, 10, 1)
    assert find_revision_date("制定日：2010年4月1日\n施行日：2010年7月1日") == dt.date(2010, 7, 1)


def test_a_date_does_not_take_the_label_of_the_next_line() -> None:
    assert find_revision_date("作成日：2025年1月1日\n改定日：2024年1月1日") == dt.date(2024, 1, 1)


def test_revision_date_falls_back_to_the_modified_date() -> None:
    modified = dt.date(2026, 1, 5)
    assert parse_document("a.md", b"# A\n\ntext", modified=modified).revision_date == modified
    stated = parse_document("b.md", "改定日：2025年4月1日".encode(), modified=modified)
    assert stated.revision_date == dt.date(2025, 4, 1)


# --- robustness ------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", sorted(SUPPORTED_SUFFIXES))
def test_random_bytes_raise_parse_error_and_nothing_else(suffix: str) -> None:
    generator = random.Random(suffix)
    for _ in range(5):
        data = bytes(generator.randrange(256) for _ in range(generator.randrange(1, 400)))
        with contextlib.suppress(ParseError):
            parse_document(f"random{suffix}", data)


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("a.md", "# a" + " " * 100_000 + "x"),
        ("a.md", "| a |\n" + " " * 100_000 + "x"),
        ("a.txt", "-" * 100_000 + "a"),
        ("a.txt", "1" + " " * 100_000 + "x"),
        ("a.html", "<p>a" + " " * 100_000 + "b</p>"),
        ("a.txt", "改定日 2020/1/1" + " " * 100_000 + "x"),
    ],
)
@pytest.mark.timeout(60)  # a hang guard against quadratic regexes, not a speed target
def test_pathological_long_lines_parse_without_hanging(name: str, line: str) -> None:
    parse_document(name, line.encode())


def test_office_file_cut_short_raises_parse_error() -> None:
    data = save(docx.Document())
    with pytest.raises(ParseError, match="DOCX"):
        parse_document("cut.docx", data[: len(data) // 2])


def test_sample_documents_all_parse() -> None:
    files = [
        path
        for path in sorted(SAMPLES.rglob("*"))
        if path.is_file() and path.suffix.lower() in SUPPORTED_SUFFIXES
    ] if SAMPLES.is_dir() else []  # fmt: skip
    if not files:
        pytest.skip("samples/docs has no documents yet")
    for path in files:
        document = parse_document(path.name, path.read_bytes())
        assert document.blocks, path
        assert document.title.strip(), path
