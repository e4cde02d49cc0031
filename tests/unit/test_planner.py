"""The question planner: which terms the keyword leg looks for, how much each weighs, and codes.

Unit tests: no database, no model. How the plans rank real passages is
tests/integration/test_search.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kb_search.planner import (
    CODE_KEYWORD_WEIGHT,
    CODE_WEIGHT,
    CONTENT_WEIGHT,
    GRAMMAR_WEIGHT,
    SYNONYM_FACTOR,
    QueryTerm,
    plan_question,
)
from kb_search.synonyms import Synonyms


def weights(question: str, synonyms: Synonyms | None = None) -> dict[str, float]:
    return {t.term: t.weight for t in plan_question(question, synonyms).terms}


@pytest.fixture
def synonyms(tmp_path: Path) -> Synonyms:
    path = tmp_path / "synonyms.txt"
    path.write_text("有給 = 年休 = 年次有給休暇\nVPN = 仮想専用線\n", encoding="utf-8")
    return Synonyms(path)


def test_a_code_weighs_most_and_forms_an_exact_code_query():
    plan = plan_question("ZP-2041の吐出量は？")
    assert plan.codes == ["zp-2041"]
    assert plan.code_query == "('zp-2041')"
    assert weights("ZP-2041の吐出量は？") == {
        "zp-2041": CODE_WEIGHT, "zp": CONTENT_WEIGHT, "2041": CONTENT_WEIGHT,
        "吐出": CONTENT_WEIGHT, "出量": CONTENT_WEIGHT,
        "の吐": GRAMMAR_WEIGHT, "量は": GRAMMAR_WEIGHT,
    }


@pytest.mark.parametrize("written", ["ＺＰ２０４１", "zp2041", "ZP – 2041"])
def test_a_code_is_planned_in_its_normal_form_however_written(written):
    assert plan_question(written).codes == ["zp-2041"]


def test_every_code_of_the_question_must_be_in_the_passage():
    plan = plan_question("QC-2031とQC-2031とZP-2041の関係")
    assert plan.codes == ["qc-2031", "zp-2041"]
    assert plan.code_query == "('qc-2031') & ('zp-2041')"


def test_an_article_is_a_code_of_its_number_followed_by_its_unit():
    plan = plan_question("第二十二条は？")
    assert plan.codes == ["第22条"]
    assert plan.code_query == "('第' <-> '22' <-> '条':*)"
    assert weights("第二十二条は？")["22"] == CODE_WEIGHT


def test_a_code_question_leans_on_the_keyword_leg_and_others_do_not():
    assert plan_question("ZP-2041の保証期間は？").keyword_weight == CODE_KEYWORD_WEIGHT
    assert plan_question("第3条の内容").keyword_weight == CODE_KEYWORD_WEIGHT
    plain = plan_question("有給休暇は何日？")
    assert (plain.keyword_weight, plain.codes, plain.code_query) == (1.0, [], None)


def test_2_grams_of_kanji_and_katakana_carry_content_and_those_touching_kana_grammar():
    assert weights("有給休暇は何日") == {
        "有給": CONTENT_WEIGHT, "給休": CONTENT_WEIGHT, "休暇": CONTENT_WEIGHT,
        "何日": CONTENT_WEIGHT, "暇は": GRAMMAR_WEIGHT, "は何": GRAMMAR_WEIGHT,
    }
    assert weights("コーヒーの〆切")["コー"] == weights("コーヒーの〆切")["〆切"] == CONTENT_WEIGHT


def test_latin_words_and_the_parts_of_hyphenated_ones_are_content():
    assert weights("VPN clientでsign-in") == {
        "vpn": CONTENT_WEIGHT, "client": CONTENT_WEIGHT, "sign-in": CONTENT_WEIGHT,
        "sign": CONTENT_WEIGHT, "in": CONTENT_WEIGHT,
    }


def test_a_run_of_three_or_more_content_characters_becomes_a_phrase():
    plan = plan_question("東京都庁と副業")
    assert plan.phrases == ["'東京' <-> '京都' <-> '都庁'"]
    phrases = {t.term: t.phrase for t in plan.terms}
    assert phrases["東京"] == phrases["京都"] == phrases["都庁"] == 0
    assert phrases["副業"] is None  # one 2-gram is no phrase


def test_a_question_of_lone_characters_searches_them_as_prefixes():
    assert plan_question("寮は？").terms == [
        QueryTerm("寮", CONTENT_WEIGHT, prefix=True), QueryTerm("寮は", GRAMMAR_WEIGHT),
    ]


def test_a_lone_character_in_a_longer_question_is_no_prefix():
    assert not any(t.prefix for t in plan_question("寮の規則").terms)


def test_synonyms_add_their_2_grams_at_a_lower_weight(synonyms):
    plan = plan_question("年休の申請", synonyms)
    assert plan.expansions == ["有給", "年次有給休暇"]
    assert plan.embed_text == "年休の申請（有給、年次有給休暇）"
    found = weights("年休の申請", synonyms)
    assert found["年休"] == found["申請"] == CONTENT_WEIGHT
    assert found["有給"] == found["年次"] == found["休暇"] == CONTENT_WEIGHT * SYNONYM_FACTOR
    assert "'年次' <-> '次有' <-> '有給' <-> '給休' <-> '休暇'" in plan.phrases


def test_a_latin_synonym_is_a_term_at_the_lower_weight(synonyms):
    assert weights("仮想専用線の設定", synonyms)["vpn"] == CONTENT_WEIGHT * SYNONYM_FACTOR


def test_a_synonym_never_lowers_a_term_the_question_holds(synonyms):
    found = weights("年次有給休暇", synonyms)
    assert found["有給"] == CONTENT_WEIGHT
    assert found["年休"] == CONTENT_WEIGHT * SYNONYM_FACTOR


def test_without_synonyms_the_question_is_embedded_as_asked():
    plan = plan_question("ＶＰＮの設定")
    assert (plan.embed_text, plan.expansions) == ("ＶＰＮの設定", [])
