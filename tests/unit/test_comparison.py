"""The comparison a multi-part answer states: only what its quoted values and their passages
hold, never a guess."""

from __future__ import annotations

from kb_search.comparison import PartValues, compare

PASSAGES = {1: "育児休業の申出は、開始予定日の30日前までに行う。",
            2: "介護休業の申出は、開始予定日の14日前までに行う。",
            3: "旧型の保証期間は納入後12か月とする。", 4: "現行型の保証期間は納入後18ヶ月とする。",
            5: "課長の宿泊費は1泊12,000円。", 6: "部長の宿泊費は1泊13000円。"}


def _part(label: str, text: str, asked: str = "の申出の期限、保証期間、宿泊費は?") -> PartValues:
    return PartValues(label, asked, text, PASSAGES)


def test_one_value_each_in_one_unit_is_compared_with_both_cited():
    found = compare([_part("育児休業", "育児休業の申出は、開始予定日の30日前までに行う。[1]"),
                     _part("介護休業", "介護休業の申出は、開始予定日の14日前までに行う。[2]")])
    assert found is not None
    comparison, line = found
    assert comparison.values == ["30日", "14日"]
    assert comparison.text == "育児休業は30日、介護休業は14日で、育児休業の方が長いです。"
    assert line == "比較：育児休業は30日[1]、介護休業は14日[2]で、育児休業の方が長いです。"


def test_spellings_of_one_unit_and_thousands_separators_compare():
    months = compare([_part("旧型", "旧型の保証期間は納入後12か月とする。[3]"),
                      _part("現行型", "現行型の保証期間は納入後18ヶ月とする。[4]")])
    assert months is not None and months[0].text.endswith("現行型の方が長いです。")
    yen = compare([_part("課長", "課長の宿泊費は1泊12,000円。[5]"),
                   _part("部長", "部長の宿泊費は1泊13000円。[6]")])
    assert yen is not None and yen[0].text.endswith("部長の方が高いです。")


def test_nothing_is_stated_when_it_cannot_be_checked():
    # different units, two values of the unit in one part, a value its passage does not hold,
    # a value cited nowhere
    b = _part("介護休業", "介護休業の申出は14日前まで。[2]")
    assert compare([_part("育児休業", "育児休業の申出は1か月前まで。[3]"), b]) is None
    assert compare([_part("育児休業", "育児休業の申出は30日前、または14日前。[1]"), b]) is None
    assert compare([_part("育児休業", "育児休業の申出は45日前まで。[1]"), b]) is None
    assert compare([_part("育児休業", "育児休業の申出は30日前まで。"), b]) is None
    # a sentence about someone else's value; two units both parts quote
    assert compare([_part("課長", "従業員の申出は30日前まで。[1]"), b]) is None
    assert compare([_part("育児休業", "育児休業の申出は30日前、3か月前まで。[1]"),
                    _part("介護休業", "介護休業の申出は14日前、1か月前まで。[2]")]) is None
    assert compare([_part("育児休業", "育児休業の申出は30日前まで。[1]"), b])  # right: stated


def test_a_value_in_a_sentence_that_says_nothing_of_what_was_asked_is_not_compared():
    passages = {1: "出生時育児休業は4週間（28日）を限度とする。",
                2: "介護休業の期間は通算93日までとする。"}
    assert compare([PartValues("育児休業", "の申請の期限は?", "4週間（28日）を限度とする。[1]",
                               passages),
                    PartValues("介護休業", "の申請の期限は?", "通算93日までとする。[2]",
                               passages)]) is None


def test_years_compare_as_dates_and_equal_values_as_equal():
    passages = {1: "1865年に移住した。", 2: "1876年に特許を得た。", 3: "特許は1876年。"}
    years = compare([PartValues("移住", "移住した年は?", "1865年に移住した。[1]", passages),
                     PartValues("特許", "特許を得た年は?", "1876年に特許を得た。[2]", passages)])
    assert years is not None and years[0].text.endswith("移住の方が早いです。")
    same = compare([PartValues("特許", "特許を得た年は?", "1876年に特許を得た。[2]", passages),
                    PartValues("特許は", "特許を得た年は?", "特許は1876年。[3]", passages)])
    assert same is not None and same[0].text.endswith("同じです。")
