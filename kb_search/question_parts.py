"""Whether a question asks several things, and the sub-questions it asks (Deep mode).

One passage rarely holds the answers to 「育児休業と介護休業の申請期限は？」 or to two questions
joined in one: retrieval for the whole question finds one part's passage and the answer is
silent on the other. Split, each part gets a search, an answerability decision and an answer of
its own (kb_search/part_answers.py).

Two shapes are recognised, by rule (offline, deterministic):
- several questions in one: after a question mark that does not end the text, or at 「と、」,
  「また、」, 「、」 or no connector at all when the clauses on both sides each ask something
  (a question word, or a clause-final 〜ですか・〜なの before the next clause begins). A later
  clause that names no topic of its own (「年休はいつもらえて、最初は何日ですか」) is asked
  about the first clause's topic;
- listed items asked the same thing: 「AとBの〜」「AとBでは〜どちらが」「A、B、Cの〜をそれぞれ」
  become 「Aの〜」「Bの〜」…, comparison words taken out (what the comparison needs is each
  item's value).

A split is only a proposal: Deep mode judges it by its outcome, and answers the whole question
as one when every part is answered from the same passage (a comparison one article answers).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

import msgspec

__all__ = ["QuestionPart", "QuestionSplit", "refers_back", "split_question"]

# A question word that asks (何も, 誰か, どこか and 幾何 do not; 何か国 does).
ASKS = re.compile(r"(?:(?<!幾)何|誰|だれ|どこ)(?!も|か(?![国月所]))|いつ|どの|どう|どんな|なぜ"
                  r"|いくら|いくつ|どちら|どっち|どれ")
_QUOTED = re.compile(r"「[^」]*」|『[^』]*』")  # words quoted in a question ask nothing
# Where one asking clause may end and the next begin, by kind of join. A bare 「、」 also
# separates the circumstances of one question from what it asks (課長が辞める場合、退職届はいつ…)
# and a 連用形 from its predicate (何を追加し、…を伸ばしましたか), so each kind has its own test.
_JOINS = re.compile(r"(?P<mark>\?)\s*(?:また|それと|あと|そして)?[、,]?\s*"
                    r"|(?P<stop>[。.])\s*(?:また[、,]?)?\s*"
                    r"|(?P<also>[、,]?\s*また[、,])\s*|(?P<and>と[、,])\s*|(?P<comma>[、,])\s*")
# A clause that ends as a question and is followed at once by the next one's first content
# character: two questions written with no connector (…何年のことなの出生時の…).
_ENDS = re.compile(r"(?:(?<=は、)(?:何|誰|どこ|いつ)か(?![国月所])"
                   r"|(?:何|誰|どこ|いつ|どれ)(?:なの|ですか)|ことなの|のことか|ですか|ますか"
                   r"|ませんか|でしたか|ましたか|でしょうか|だったか|だったの|したか|したの"
                   r"|れたか|れたの|ったか|ったの|いたの|きたの|んだの|ていたの|ているの|ていたか"
                   r"|ているか|であるか|であるの|あったか|(?:誰|何|どこ|いつ|の)かな|(?<=[一-龥])なの)"
                   r"(?=[0-9A-Za-z一-龥々〆ヵヶァ-ヴー「『])")
# How near its end the question word of a clause that asks before 「、」 stands (どこで、
# 何日前までに申請し、): further back, it asks about something the clause goes on to qualify.
_ASKED_NEAR_END = 8
# Where a question may end with nothing to show it (〜の名称は何大切谷に…, 〜の名前は、谷田部…,
# 〜季節はと、…, 〜ますか、…): only the parts' retrieval tells (QuestionSplit.tentative). A
# counter after 何 (何年, 何人) goes on asking.
_MAYBE_JOIN = re.compile(
    r"(?P<left>(?<=は)(?:何|誰|どこ|いつ)(?![年月日時分人名回歳度色番号個本台種枚位割倍階部巻話作つ])"
    r"(?=[0-9A-Za-z一-龥々〆ヵヶァ-ヴー「『])"
    r"|(?<!で)は(?=と?[、,])|(?:ですか|ますか|でしたか|ましたか|の|か)(?=[、,])"
    # 〜何本あると、: a question, or a condition (誰が死ぬと、…) that names no topic after it
    r"|(?<=[何誰])[^、,?]{0,8}(?=と[、,]))と?[、,]?")
_SIDE = 6  # characters each side needs to be a question of its own
_QUOTED_OPEN = re.compile(r"[「『][^」』]*$")  # a join inside quotes joins nothing
# 〜か、それとも〜か: one question offering a choice.
_CHOICE = re.compile(r"(?:それとも|もしくは|または|あるいは)")
# The topic a clause asks about: what stands before its first は (or について) when that comes
# before its question word.
_TOPIC = re.compile(r"^(?P<topic>[0-9A-Za-z一-龥々〆ヵヶァ-ヴー・\-の]{2,16}?)(?:について|では|は)")
# A clause that asks without a question word: 〜ですか, 〜なの, 〜は、何か.
_QUESTION_END = re.compile(r"(?:(?:(?:何|誰|どこ|いつ|どれ|どちら)か|ことか|ですか|ますか"
                           r"|でしょうか|のか|なの|たの|るの|たか|るか|かな|んだの|知りたい(?:です)?|教えて(?:ください)?)\??|は\?)$")
# Listed items: content runs (ZP-2041, 育児休業, 第8条, a parenthesised note after one) joined by
# と・や・、・および, then the particle that hangs the rest of the question on them.
_ITEM = r"[0-9A-Za-z一-龥々〆ヵヶァ-ヴー・\-]+(?:\([^()]{1,12}\))?"
_ITEMS = re.compile(
    rf"(?<![0-9A-Za-z一-龥々〆ヵヶァ-ヴー・\-」』)\0])"
    # A, B と C (the 、 come before the last と), or A、B、C
    rf"(?P<items>{_ITEM}(?:[、,]{_ITEM})*(?:(?:と|や|および|及び){_ITEM})+|{_ITEM}(?:[、,]{_ITEM})+)"
    r"(?P<particle>とでは|とで|では|で|には|について|に関して|の|は|、|に|を|が)(?P<rest>.+)$")
_ITEM_SEPARATOR = re.compile(r"と|、|,|や|および|及び")
# What the rest of the question says of the items together: asked per item it means nothing
# (the distance between A and B, their relation, their sum).
_JOINT = re.compile(r"^(?:間|関係|関連|共通|組み合わせ|併用|両立|合計|合わせ|両方とも|どちらも|対立"
                    r"|戦い|同盟|交流|共同|合併|うち)")
# Comparison words, taken out of each item's sub-question.
_COMPARING = (
    (re.compile(r"(?:は|に|で)?(?:どう|どのように)違(?:う|います)(?:のか|の|か)?\??$"), "は?"),
    # 〜はいくら違いますか asks each item's amount: いくらですか.
    (re.compile(r"(?P<ask>いくら|何[^\s、,]{0,2}?|どれくらい|どのくらい|どれだけ)(?:が|は|に|で)?"
                r"違(?:う|います)(?:のか|の|か)?\??$"), r"\g<ask>ですか?"),
    (re.compile(r"(?:が|は|に|で)?違(?:う|います)(?:のか|の|か)?\??$"), "は?"),
    (re.compile(r"の違いは(?:何)?(?:ですか|でしょうか)?\??$"), "は?"),
    (re.compile(r"(?:に|で)?(?:は)?(?:どのくらい|どれくらい|どれだけ)?差が(?:あり|ある)(?:ます)?か?\??$"),
     "は?"),
    (re.compile(r"(?:が|は)同じ(?:ですか|か|なの)?\??$"), "は?"),
    (re.compile(r"が(?:長い|短い|多い|少ない|高い|安い|早い|遅い|良い|大きい|小さい)のは"
                r"(?:どちら|どっち)(?:ですか)?\??$"), "は?"),
    (re.compile(r"(?:どちら|どっち)(?:が|の方が|のほうが)"), ""),
    (re.compile(r"それぞれ|各々"), ""),
    (re.compile(r"を(?:比較|比べ)(?:して|すると)"), "を"),
)
_COMPARES = re.compile(r"どちら|どっち|違い|違う|異なる|差|比較|比べ|多い|少ない|長い|短い|早い"
                       r"|遅い|高い|安い")
_EACH = re.compile(r"それぞれ|各々|各")
_ITEM_PARTICLES = {"の", "は", "では", "で", "について", "に関して", "には"}


# A part that opens on what an earlier part asked about (その工場の品質責任者は誰?): its answer
# lies one reference away from the earlier part's subject.
_REFERS_BACK = re.compile(r"^(?:その|この|当該|そこ|それら?の|同じ)")


def refers_back(part: str) -> bool:
    """Whether a part's question opens on what an earlier part asked about."""
    return _REFERS_BACK.match(part) is not None


class QuestionPart(msgspec.Struct, frozen=True):
    """A sub-question, asked alone, and what the answer calls it."""

    question: str
    label: str  # the item it is about, or the sub-question itself


class QuestionSplit(msgspec.Struct, frozen=True):
    """The parts a question asks; one part for a single question."""

    parts: list[QuestionPart]
    kind: Literal["single", "questions", "items"]
    # Parts found beyond the limit: the question is then asked as one, and the answer says so.
    over_limit: int = 0
    compares: bool = False  # items compared: their values may be compared in the answer
    # A split that only its outcome can confirm: kept when each part finds evidence in a
    # document of its own, else the question is answered whole (kb_search/part_answers.py).
    tentative: bool = False

    @property
    def multi(self) -> bool:
        return len(self.parts) > 1

    @property
    def asked(self) -> int:
        """How many things the question asks, as far as its wording tells: what a whole
        answer should hold a sentence for each of (kb_search/answerers/sentences.py)."""
        return 1 if self.tentative else len(self.parts)


def split_question(question: str, max_parts: int = 4) -> QuestionSplit:
    """The sub-questions of `question`, at most `max_parts` (more are asked as one)."""
    text = unicodedata.normalize("NFKC", question).strip()
    kind: Literal["single", "questions", "items"] = "questions"
    parts = _questions(text)
    if len(parts) < 2:
        kind, parts = "items", _items(text)
    if len(parts) < 2:
        if parts := _tentative(text):
            return QuestionSplit(parts, "questions", tentative=True)
        return QuestionSplit([QuestionPart(question, _label(question))], "single")
    if len(parts) > max_parts:
        return QuestionSplit([QuestionPart(question, _label(question))], "single",
                             over_limit=len(parts))
    return QuestionSplit(parts, kind, compares=kind == "items" and bool(_COMPARES.search(text)))


def _tentative(text: str) -> list[QuestionPart]:
    """Two questions joined where the join alone cannot tell: a question that ends in its
    question word or its topic (〜の名称は何, 〜の名前は、) before the next one begins."""
    for found in _MAYBE_JOIN.finditer(text):
        left, right = text[: found.end("left")], text[found.end():]
        if (len(left) >= _SIDE and len(right) >= _SIDE and _asks(right)
                and _names_own_topic(right) and not _QUOTED_OPEN.search(left)):
            return [QuestionPart(f"{_trimmed(left)}?", _label(left)),
                    QuestionPart(_trimmed(right) if right.endswith("?") else f"{_trimmed(right)}?",
                                 _label(right))]
    return []


def _names_own_topic(clause: str) -> bool:
    """Whether a clause names, before what it asks, a topic of its own (〜の名前は何, 〜の面積は
    どれくらい): a clause that goes on a question's topic (〜は、何年のことなの) names none."""
    first_ask = ASKS.search(clause)
    head = clause[: first_ask.start()] if first_ask else clause[:-4]
    return re.search(r"(?<!で)は", head[1:]) is not None


def _asks(clause: str) -> bool:
    """Whether a clause asks something: a question word, or a question's ending."""
    return _has_question_word(clause) or _ends_as_question(clause)


def _has_question_word(clause: str) -> bool:
    return ASKS.search(_QUOTED.sub("", clause)) is not None


def _ends_as_question(clause: str) -> bool:
    bare = _trimmed(_QUOTED.sub("", clause))
    return (_QUESTION_END.search(bare) is not None
            or re.search(rf"(?:{ASKS.pattern})\??$", bare) is not None)


def _questions(text: str) -> list[QuestionPart]:
    """Several questions in one: `text` cut at each join whose clauses on both sides ask."""
    quoted = [m.span() for m in _QUOTED.finditer(text)]
    # A question mark ends its clause; what joins the next (それと、) opens that one.
    cuts = sorted([(m.end("mark") if m.lastgroup == "mark" else m.end(), m.lastgroup or "")
                   for m in _JOINS.finditer(text) if m.end() < len(text)]
                  + [(m.end(), "none") for m in _ENDS.finditer(text)])
    cuts = [(cut, kind) for cut, kind in cuts if not any(a < cut < b for a, b in quoted)]
    clauses: list[tuple[str, str]] = []  # a clause, and the kind of join before it
    start, joined = 0, ""
    for cut, kind in cuts:
        left, right = text[start:cut], text[cut:]
        if _splits(left, right, kind):
            clauses.append((left, joined))
            start, joined = cut, kind
    clauses = [(_trimmed(c), k) for c, k in [*clauses, (text[start:], joined)]]
    if len(clauses) < 2 or not all(c for c, _ in clauses):
        return []
    topic = _TOPIC.match(clauses[0][0])
    parts = []
    for clause, kind in clauses:
        asked = clause if clause.endswith("?") else f"{clause}?"
        # 〜と、 and no connector join whole questions, each with its own topic.
        if kind not in ("", "and", "none") and topic and not _has_topic(clause):
            asked = f"{topic.group('topic')}について、{asked}"
        parts.append(QuestionPart(asked, _label(clause)))
    return parts


def _splits(left: str, right: str, kind: str) -> bool:
    """Whether a join of `kind` between `left` (since the last cut) and `right` (the rest)
    separates two questions."""
    if kind in ("mark", "none"):
        return _asks(right)
    if kind in ("stop", "also"):
        return _asks(left) and _asks(right)
    if kind == "and":  # 〜ですかと、〜 (〜者かと、): the first must read as a whole question
        return (_ends_as_question(left) or _trimmed(left).endswith("か")) and _asks(right)
    # 「、」: a question that ended (何年のことなの、), or two clauses each with a question word,
    # the first not ending in a topic or an argument (準州都をどこに置くかについての投票は、い
    # つ…; どの部品の、どんな問題). Without a question word, 〜なの、〜なの offers a choice.
    if _CHOICE.match(right):
        return False
    asked_alone = _has_question_word(left) or re.search(r"(?:何|誰|どこ|いつ)か$", _trimmed(left))
    ended = _ends_as_question(left) and asked_alone and _asks(right)
    asked = [m.end() for m in ASKS.finditer(_trimmed(left))]
    both = (bool(asked) and len(_trimmed(left)) - asked[-1] <= _ASKED_NEAR_END
            and _has_question_word(right) and not re.search(r"[はがをもの]$", _trimmed(left)))
    return ended or both


def _trimmed(clause: str) -> str:
    """A clause without the join it ends with (its question mark kept)."""
    kept = re.sub(r"(?:と[、,]|[、,。.]|また[、,]?|\s)+$", "", clause)
    return re.sub(r"^(?:また|それと|あと|そして)[、,]?", "", kept).strip()


def _has_topic(clause: str) -> bool:
    """Whether a clause names what it asks about: a word of four or more content characters
    before its question word (最初は何日 names nothing; 慶弔休暇は何日 does)."""
    first_ask = ASKS.search(clause)
    head = clause[: first_ask.start()] if first_ask else clause
    return re.search(r"[0-9A-Za-z一-龥々〆ヵヶァ-ヴー]{4,}", head) is not None


def _items(text: str) -> list[QuestionPart]:
    """Listed items asked the same thing: one sub-question per item."""
    found = _ITEMS.search(_QUOTED.sub(lambda m: "\0" * len(m.group()), text))
    if found is None:
        return []
    each = _EACH.search(text) is not None
    particle = found.group("particle")
    joined = re.search(r"と|や|および|及び", found.group("items")) is not None
    # 「、」 alone also follows a circumstance (辞める場合、退職届は…): a list needs a と or や,
    # or the question's それぞれ; so does an item taking に・を・が (東京と大阪に出張して), and
    # the 「、」 after the items (ZP-2041とZP-2045、保証期間が…).
    if not (joined or each) or (particle in ("に", "を", "が") and not each) or (
            particle == "、" and not joined):
        return []
    rest = text[found.start("rest"):]
    lead = text[: found.start()]
    # 〜は、AとBのどちらですか offers the items as the answer's candidates: one question.
    choice = lead.strip() and re.search(r"どちら|どっち|どれ|うち", rest)
    if _JOINT.match(rest) or choice or any(ASKS.fullmatch(i) for i in _ITEM_SEPARATOR.split(
            found.group("items"))):
        return []
    for pattern, replacement in _COMPARING:
        rest = pattern.sub(replacement, rest)
    # 〜の申請期限は asks too, without its question mark (_asks reads 〜は? and 〜を教えて).
    if not (_asks(rest) or rest.endswith("は") or _COMPARES.search(text)):
        return []
    items = [i for i in _ITEM_SEPARATOR.split(found.group("items")) if i]
    if rest.startswith("各"):  # 仮払金と出張旅費、各精算の期限: 各 names what is asked of each
        rest, particle = rest[1:], "の"
    if len(items) < 2 or len(set(items)) < len(items):
        return []
    particle = particle if particle in _ITEM_PARTICLES | {"に", "を", "が"} else "の"
    return [QuestionPart(f"{lead}{item}{particle}{rest}".strip(), item) for item in items]


def _label(clause: str) -> str:
    """What the answer calls a part asked as a question: the clause, shortened."""
    bare = clause.strip().rstrip("?？。")
    return bare if len(bare) <= 24 else bare[:23] + "…"
