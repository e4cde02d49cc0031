"""What the rule-based extractor (kb_core/entities.py) names in passages and questions."""

from __future__ import annotations

from kb_core.entities import CANDIDATES, NAME_CHARS, entities_of, name_candidates, passage_graph


def keys(text: str) -> list[str]:
    return [entity.key for entity in entities_of(text)]


def test_a_code_is_one_entity_however_it_is_typed_and_another_digit_is_another():
    assert keys("ＺＰ‐２０４１の保証") == keys("zp2041の保証") == ["zp-2041"]
    assert keys("ZP-2041の保証") == ["zp-2041"]
    assert keys("ZP-2014とZP-2041とQC-2031とQC-2013") == ["zp-2014", "zp-2041", "qc-2031",
                                                         "qc-2013"]
    assert entities_of("KP-2041-03")[0].name == "KP-2041-03"


def test_documents_units_and_roles_are_named_by_their_kind():
    found = {e.key: e.kind for e in entities_of(
        "出張旅費規程を所管する経理課の課長と、湖西工場の品質責任者、製品仕様一覧")}
    assert found == {"出張旅費規程": "document", "経理課": "unit", "課長": "role",
                     "湖西工場": "unit", "品質責任者": "role", "製品仕様一覧": "document"}


def test_a_unit_needs_two_characters_before_its_kind_and_a_pointing_word_is_dropped():
    assert keys("全部で3台、一部は本部へ") == []
    assert keys("水琴窟内部の空洞、大陸の南東部、ポンプ先端部") == []  # parts and regions
    assert keys("当社湖西工場で") == ["湖西工場"]
    assert keys("本規程および同規程") == []
    assert keys("品質保証部長が任命する") == ["品質保証部", "部長"]


def test_an_article_belongs_to_the_regulation_named_before_it_else_to_the_passages_own():
    assert "就業規則第18条" in keys("就業規則の第18条で別に定める")
    graph = passage_graph("【経費精算規程】第1章 総則 > 第2条（適用範囲）\n"
                          "出張に伴う交通費は、別に定める「出張旅費規程」による。")
    assert {e.key for e in graph.entities} == {"経費精算規程", "経費精算規程第2条", "出張旅費規程"}


def test_a_referring_sentence_relates_what_it_names_to_its_heading_and_a_row_its_cells():
    graph = passage_graph("【経費精算規程】第1章 総則 > 第2条（適用範囲）\n"
                          "この規程は全従業員に適用する。交通費は「出張旅費規程」による。")
    assert {(r.source, r.target, r.kind) for r in graph.references} == {
        ("経費精算規程第2条", "出張旅費規程", "reference")}
    table = passage_graph("【品質不具合・是正処置管理台帳】台帳\n"
                          "NC-2405-03 | ZP-2014 | 本社工場 | 課長 | QC-2013\n"
                          "ZP-2041は湖西工場で組み立てる。")
    assert {(r.source, r.target) for r in table.references if r.kind == "row"} == {
        ("nc-2405-03", "zp-2014"), ("nc-2405-03", "本社工場"), ("nc-2405-03", "qc-2013"),
        ("zp-2014", "本社工場"), ("zp-2014", "qc-2013"), ("本社工場", "qc-2013")}
    # A sentence that refers to nothing names things together, which the mentions say.
    assert not [r for r in table.references if "zp-2041" in (r.source, r.target)]


def test_a_spaced_title_is_one_name_and_still_names_its_parts():
    graph = passage_graph("【人事評価制度 運用ガイド（評価者向け）】4. 評語\n第3条による。")
    keys_ = {e.key for e in graph.entities}
    assert "人事評価制度運用ガイド" in keys_
    assert "人事評価制度運用ガイド第3条" in keys_  # the article is the titled document's
    assert {e.key for e in passage_graph("【本社工場 検査記録】手順").entities} == {"本社工場"}


def test_a_question_is_looked_up_by_every_name_it_could_write_a_code_whole():
    names = name_candidates("ＺＰ‐２０４１のギヤ・ハウジングは何mm？")
    assert {"zp-2041", "ギヤハウジング", "ギヤ", "ハウジング"} <= set(names)
    # A code or Latin word is never cut (zp-204, p-2041, m), a number is no name.
    assert not {"zp-204", "p-2041", "zp", "2041", "m"} & set(names)
    assert all(2 <= len(name) <= NAME_CHARS for name in names)
    assert len(name_candidates("品質" * 1000)) <= CANDIDATES
    assert len(name_candidates("".join(chr(0x4E00 + i) for i in range(2000)))) == CANDIDATES
