"""How a question is split into the parts it asks (Deep mode), and what is asked as one."""

from __future__ import annotations

import pytest

from kb_search.question_parts import refers_back, split_question


def _parts(question: str) -> list[str]:
    return [p.question for p in split_question(question).parts]


@pytest.mark.parametrize(("question", "parts", "labels"), [
    ("育児休業と介護休業の申請期限は？",
     ["育児休業の申請期限は?", "介護休業の申請期限は?"], ["育児休業", "介護休業"]),
    ("QC-2031とQC-2013の不具合原因をそれぞれ教えて",
     ["QC-2031の不具合原因を教えて", "QC-2013の不具合原因を教えて"], ["QC-2031", "QC-2013"]),
    # the comparison words leave each item's sub-question; what it asks stays
    ("大卒と高専卒では初任給はいくら違いますか",
     ["大卒では初任給はいくらですか?", "高専卒では初任給はいくらですか?"], ["大卒", "高専卒"]),
    ("ZP-2014（旧型）とZP-2041とで保証期間にどのくらい差がありますか",
     ["ZP-2014(旧型)の保証期間は?", "ZP-2041の保証期間は?"], ["ZP-2014(旧型)", "ZP-2041"]),
    # a list joined by 、 alone when それぞれ says so, and the items' own verb
    ("一般社員がシンガポール、バンコク、ドバイに出張する場合、1日あたりの日当はそれぞれいくらですか",
     ["一般社員がシンガポールに出張する場合、1日あたりの日当はいくらですか",
      "一般社員がバンコクに出張する場合、1日あたりの日当はいくらですか",
      "一般社員がドバイに出張する場合、1日あたりの日当はいくらですか"],
     ["シンガポール", "バンコク", "ドバイ"]),
    ("仮払金と出張旅費、各精算の期限を教えてください",
     ["仮払金の精算の期限を教えてください", "出張旅費の精算の期限を教えてください"],
     ["仮払金", "出張旅費"]),
])
def test_listed_items_asked_the_same_thing_become_one_part_each(question, parts, labels):
    split = split_question(question)
    assert split.kind == "items"
    assert [p.question for p in split.parts] == parts
    assert [p.label for p in split.parts] == labels


@pytest.mark.parametrize(("question", "parts"), [
    ("有給休暇は何日前までに申請が必要ですか？また、慶弔休暇は何日もらえますか？",
     ["有給休暇は何日前までに申請が必要ですか?", "慶弔休暇は何日もらえますか?"]),
    # a later clause naming no topic of its own asks about the first one's
    ("年休は入社してからいつもらえて、最初は何日ですか",
     ["年休は入社してからいつもらえて?", "年休について、最初は何日ですか?"]),
    ("試用期間は何か月ですか？また、延びることはありますか？",
     ["試用期間は何か月ですか?", "試用期間について、延びることはありますか?"]),
    ("メールボックスの容量はどれくらいありますか？それと、仮パスワードの有効期限も知りたいです",
     ["メールボックスの容量はどれくらいありますか?", "仮パスワードの有効期限も知りたいです?"]),
    # the joins of the generated JaQuAD pairs: と、, one question mark, no connector
    ("ベル一家が引っ越したのは、何年のことなのと、出生時に最も多いヘモグロビンは何か?",
     ["ベル一家が引っ越したのは、何年のことなの?", "出生時に最も多いヘモグロビンは何か?"]),
    ("ベル一家が引っ越したのは、何年のことなの、出生時に最も多いヘモグロビンは何か?",
     ["ベル一家が引っ越したのは、何年のことなの?", "出生時に最も多いヘモグロビンは何か?"]),
    ("ベル一家が引っ越したのは、何年のことなの出生時に最も多いヘモグロビンは何か?",
     ["ベル一家が引っ越したのは、何年のことなの?", "出生時に最も多いヘモグロビンは何か?"]),
    ("キュロス2世は、どの王朝の者かと、ベルの妻の名前は何?",
     ["キュロス2世は、どの王朝の者か?", "ベルの妻の名前は何?"]),
    ("もっとあとで生まれたのは誰かな『条約改正論』はどこで出版されましたか?",
     ["もっとあとで生まれたのは誰かな?", "『条約改正論』はどこで出版されましたか?"]),
])
def test_several_questions_in_one_become_one_part_each(question, parts):
    split = split_question(question)
    assert (split.kind, split.tentative) == ("questions", False)
    assert _parts(question) == parts


@pytest.mark.parametrize("question", [
    "課長が自己都合で辞める場合、退職届はいつまでに出す必要がありますか",  # a circumstance
    "経費精算の締め日と申請期限を教えてください",  # two things of one rule, asked together
    "取引先との会食で1人あたり1万2千円かかる場合、誰の承認が必要ですか",
    "航続距離を延長するエアバスは、何を追加し、最大航続距離を引き上げましたか?",  # 連用形
    "QC-2013で液漏れの原因になったのはどの部品の、どんな問題ですか",  # a genitive
    "グルナッシュ種は温暖な地域に適しているか、それとも寒冷な地域に適しているか",  # a choice
    "パイプオルガンの天使が描いてあるのは左のパネルなの、右のパネルなの?",
    "路面標示の設置工事の原則的な時間帯は、夜間と昼間のどちらですか?",  # items as candidates
    "織田氏と毛利氏の対立が決着した後、秀吉の家臣に変わった人は誰?",  # what the items share
    "ベルチェが初めて生み出したものとは、鉄と何の合金であるの?",  # a question word as an item
    "「三雲みんなの図書館コミュカル」の名称が付いたのはいつですか?",  # inside quotes
    "来週、大阪で会食する予定ですが、事前に何か申請しておく必要はありますか",
    "日立鉱山の近くにあるなだらかな山地は何?",  # かな inside a word
])
def test_a_single_question_stays_whole(question):
    assert split_question(question).kind == "single"


def test_a_split_only_its_outcome_can_confirm_is_tentative():
    split = split_question("全国で31番目に認可された図書館の現在の名称は何"
                           "大切谷のスラグの面積はどれくらいですか?")
    assert split.tentative and split.asked == 1
    assert _parts(split.parts[0].question) == [split.parts[0].question]


def test_more_parts_than_the_limit_are_asked_as_one_and_counted():
    question = "ZP-2041、ZP-2045、ZP-2014の保証期間をそれぞれ知りたいです"
    assert len(split_question(question).parts) == 3
    limited = split_question(question, max_parts=2)
    assert limited.kind == "single" and limited.over_limit == 3
    assert limited.parts[0].question == question


def test_only_compared_items_may_have_their_values_compared():
    assert split_question("育児休業と介護休業では、申請の期限はどう違いますか").compares
    assert not split_question("育児休業と介護休業の申請期限は？").compares
    assert not split_question("有給休暇は何日前までに申請しますか？また、慶弔休暇は何日？").compares


def test_a_part_that_opens_on_an_earlier_parts_subject_refers_back():
    # The graph leg of such a part starts from what the earlier parts named
    # (AnswerFlow._search_parts): its answer is one reference away from them.
    split = split_question("QC-2031の対象ロットはどの工場で製造されましたか。"
                           "その工場の品質責任者は誰ですか")
    assert [refers_back(p.question) for p in split.parts] == [False, True]
    assert not refers_back("育児休業の申請期限は?")
    assert refers_back("この規程ではマイカーの単価はいくらですか?")
