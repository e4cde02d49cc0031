"""Keyword terms of Japanese text: one normal form, 2-grams of CJK runs, codes, tsvector literals.

Unit tests: no database, no model. The index and the question planner share `normalize`, the
character classes and `bigrams`, so a document holding a question's text holds its 2-grams.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kb_core import keywords
from kb_core.keywords import CJK_RUN, bigrams, normalize, terms, to_tsvector_literal
from kb_search.planner import plan_question

# Characters that exercise the normalization and the run boundaries: kana and kanji with the
# marks written as kanji, long-vowel marks and dashes, width variants, a kanji beyond the BMP,
# Thai and Hangul, Latin letters, digits and punctuation.
JAPANESE = list(
    "あいのはをがゝゞアイカガヶーヽ・゠ｶﾞｰ人日本東京都庁第条二十〇々〆𠮷"
    "ㇰกไทย한국ZPzp2041０１,-‐－−ー 　。、？!'\\"
)


def question_grams(text: str) -> set[str]:
    """The 2-grams the planner searches for when `text` is the whole question."""
    return {t.term for t in plan_question(text).terms
            if not t.prefix and CJK_RUN.fullmatch(t.term)}


def test_width_and_case_fold_to_one_form():
    assert normalize("ＺＰ‐２０４１") == "zp-2041"
    assert normalize("ＶＰＮ Ｃｌｉｅｎｔ") == "vpn client"


@pytest.mark.parametrize("written", ["ZP–2041", "ZP − 2041", "zpー2041", "ZP－2041", "zpｰ2041"])
def test_dashes_between_latin_letters_and_digits_become_a_hyphen(written):
    assert normalize(written) == "zp-2041"


@pytest.mark.parametrize("word", ["コーヒー", "ｺｰﾋｰ", "データ-ベース", "ー2041"])
def test_a_long_vowel_mark_outside_codes_stays_as_it_is(word):
    assert normalize(word) == {"ｺｰﾋｰ": "コーヒー"}.get(word, word)


@pytest.mark.parametrize(("written", "normal"), [
    ("第二十二条", "第22条"), ("第百五条", "第105条"), ("第三章", "第3章"),
    ("第十項", "第10項"), ("第二〇条", "第20条"), ("第千二百三十四号", "第1234号"),
])
def test_kanji_article_numbers_become_arabic_digits(written, normal):
    assert normalize(written) == normal


def test_thousands_separators_are_dropped_from_numbers_only():
    assert normalize("5,000円") == "5000円"
    assert normalize("1,234,567") == "1234567"
    assert normalize("1,23と4,5") == "1,23と4,5"


def test_a_code_written_without_its_hyphen_is_the_same_code():
    assert normalize("ZP2041") == "zp-2041"
    assert terms("zp2041の仕様") == terms("ZP-2041の仕様")
    assert normalize("abcdefg2041") == "abcdefg2041"  # seven letters: a word, not a code


def test_a_cjk_run_yields_its_2_grams_and_its_last_character():
    assert terms("有給休暇") == ["有給", "給休", "休暇", "暇"]


def test_a_one_character_run_is_its_own_term():
    assert terms("寮") == ["寮"]
    assert terms("寮 と 社宅") == ["寮", "と", "社宅", "宅"]


def test_latin_words_and_code_parts_are_terms_with_the_whole_code():
    assert terms("VPN clientでsign in") == ["vpn", "client", "で", "sign", "in"]
    assert terms("QC-2031") == ["qc", "2031", "qc-2031"]
    assert terms("ZP-2041の吐出量") == ["zp", "2041", "zp-2041", "の吐", "吐出", "出量", "量"]


def test_kanji_marks_and_kanji_beyond_the_bmp_stay_inside_their_runs():
    assert terms("人々") == ["人々", "々"]
    assert terms("〆切") == ["〆切", "切"]
    assert terms("二〇二四年") == ["二〇", "〇二", "二四", "四年", "年"]
    assert terms("𠮷野家") == ["𠮷野", "野家", "家"]


def test_bigrams_of_an_empty_or_one_character_run_are_none():
    assert bigrams("") == []
    assert bigrams("寮") == []


def test_bigrams_of_longer_runs_overlap_in_order():
    assert bigrams("副業") == ["副業"]
    assert bigrams("東京都庁") == ["東京", "京都", "都庁"]


@pytest.mark.parametrize("text", ["人々", "〆切", "人々の〆切は二〇二四年", "𠮷野家の牛丼"])
def test_the_index_holds_every_2_gram_the_planner_searches_for(text):
    assert question_grams(text)
    assert question_grams(text) <= set(terms(text))


# Stretches of the characters above between arbitrary ones: drawn one by one from all of
# Unicode, a kanji next to 々 was too rare for the property to find the old mismatch.
TEXTS = st.lists(
    st.text(st.sampled_from(JAPANESE), min_size=1, max_size=8) | st.characters(), max_size=6
).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_a_document_with_a_questions_text_holds_all_its_2_grams(text):
    assert question_grams(text) <= set(terms(text))


def test_tsvector_literal_lists_each_term_once_with_its_positions():
    assert to_tsvector_literal("東京の東京") == "'東京':1,4 '京の':2 'の東':3 '京':5"


def test_tsvector_literal_doubles_quotes_and_backslashes(monkeypatch):
    # No term holds either today; the literal must stay valid if one ever does.
    monkeypatch.setattr(keywords, "terms", lambda text: ["it's", "a\\b"])
    assert to_tsvector_literal("") == "'it''s':1 'a\\\\b':2"


def test_tsvector_positions_stop_at_postgresqls_limit():
    literal = to_tsvector_literal(" ".join(str(n) for n in range(1, 20001)))
    entries = dict(entry.split(":") for entry in literal.split(" "))
    assert entries["'16383'"] == "16383"
    assert entries["'16384'"] == entries["'20000'"] == "16383"


def test_tsvector_keeps_256_positions_of_a_lexeme():
    (entry,) = to_tsvector_literal("寮 " * 300).split(" ")
    assert entry == "'寮':" + ",".join(str(n) for n in range(1, 257))
