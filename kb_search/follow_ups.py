"""Follow-up questions, read offline in the context of the conversation they continue.

A conversation is a chain of answers a caller received (the query log's `follows`). A question
that follows one is read with up to KB_CONVERSATION_TURNS earlier turns: their questions as
searched, and the passages they cited that the caller may still read (a passage of a group the
caller has since lost is neither used nor named).

An ellipsis naming something of the kind of the latest turn's topic is that turn's question with
it in the topic's place (`in_place`: 「課長の出張日当はいくらですか」 for 「じゃあ課長は？」).
Otherwise its reading in context is the question with the earlier turns' topic put before it:
「年次有給休暇・申請について、半日単位でも取れる？」, answered for the topic's first word
(`Reading`). The topic of a turn is the codes it asked
about and the words of its question that name the passages it cited (their document's title or
heading: 年次有給休暇 of 「第22条（年次有給休暇の申請）」), then those their text writes; when
none of them is readable any more, the first word it asked about. A question naming a code of
its own asks about it instead of the earlier codes. Whether the reading is kept is judged by
outcome (kb_search/answer_flow.py): it must find stronger evidence than the question alone, or
as strong for a question that points back (それ, その, じゃあ…) or is an ellipsis (「部長な
ら？」); a change of topic finds its evidence alone and keeps it, and a question of its own
whose reading found only the earlier topic's passages is read alone (`speaks_of`).

With an LLM answerer, the model writes the question out in full from the earlier turns
(REWRITE_PROMPT) and its rewrite is read instead, once checked (`checked_rewrite`): every word
of it must come from the question or the conversation it was shown, so a rewrite cannot bring
in a topic nobody asked about. The earlier turns the model sees, for the rewrite and for the
answer, are their questions, and their answers only where the caller may still read every
passage an answer cited (`exchanges`).
"""

from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple

import msgspec

from kb_core.keywords import normalize
from kb_search.answerers.answer import CITATION, Exchange
from kb_search.search import SearchHit

__all__ = [
    "EarlierTurn",
    "Reading",
    "checked_rewrite",
    "continues",
    "exchanges",
    "in_context",
    "in_place",
    "speaks_of",
    "topic",
]

# A question that points back at what was said, or opens as a turn of a conversation does.
_POINTS_BACK = re.compile(r"それ|その|そこ|そちら|こちら|この|これ|あれ|あの|同じ|前述|上記|当該")
_OPENING = r"(?:じゃあ|じゃ|では|それでは|それなら|なら|だったら|ちなみに|あと|また)[、,]?"
_OPENS = re.compile(f"^{_OPENING}")
# What a question says before what it asks, when it points back: dropped from the reading.
_POINTER = re.compile(rf"^(?:{_OPENING})?(?:(?:それ|これ|あれ|そこ|そちら|こちら)"
                      r"(?:って|には|とは|では|にも|は|が|を|で|の|に|も|なら)?"
                      r"|その|この|あの|同じ|当該)?[、,]?")
# A question cut short after what it changes: 「部長なら？」「社外の人との打合せだったら？」.
_CONDITIONAL = re.compile(r"(?:だったら|なら|場合は|場合|では|だと)[?？]?$")
_TOPIC_ONLY = re.compile(r"は[?？]$")
# An ellipsis naming only what it puts in the earlier question's place: 「じゃあ課長は？」,
# 「育児休業と介護休業だと？」.
_IN_PLACE = re.compile(rf"^(?:{_OPENING})?(?P<named>[^、,。?？\s]{{1,15}}?)"
                       r"(?:だったら|なら|だと|の場合は|の場合|では|は)[?？]?$")
_ELLIPSIS_LENGTH = 20
_ITEMS = re.compile(r"と|や|、|・")
_WORD = re.compile(r"[0-9A-Za-z一-龥々〆ヵヶァ-ヴー][0-9A-Za-z一-龥々〆ヵヶァ-ヴー\-]+")
_CODE = re.compile(r"[A-Za-z]{1,6}-?\d{2,}(?:-\d+)*")
_ASKING = re.compile(r"^(?:何|誰|どこ|いつ|どの|どう|どんな|なぜ|いくら|いくつ)")
_TOPIC_WORDS = 3  # at most: enough to name a topic, too few to outweigh the question


class EarlierTurn(msgspec.Struct, frozen=True):
    """A turn the question follows: what was asked, what it was searched as, the passages its
    answer cited that the caller may read now, and the answer when the caller may still read
    every passage it cited (else None)."""

    question: str
    asked_as: str
    cited: list[SearchHit]
    answer: str | None = None


def continues(question: str) -> bool:
    """Whether a question points back at the conversation (それ, その, この…), opens as a
    turn of one does (じゃあ, では, なら…), or is an ellipsis that asks nothing of its own
    (「管理職だったら？」「子どもが2人いる場合は？」)."""
    text = unicodedata.normalize("NFKC", question).strip()
    if _POINTS_BACK.search(text) or _OPENS.match(text):
        return True
    if len(text) > _ELLIPSIS_LENGTH:
        return False
    # 「〜は？」 is an ellipsis unless it names a code (「ZP-2041の保証期間は？」 is a question).
    return bool(_CONDITIONAL.search(text) or _TOPIC_ONLY.search(text) and not _CODE.search(text))


def topic(turn: EarlierTurn) -> list[str]:
    """What a turn asked about: its codes, the words of its question that name a passage it
    cited (its title or heading), then those the passages write; else its first word."""
    asked = unicodedata.normalize("NFKC", turn.asked_as)
    codes = _CODE.findall(asked)
    words = _content_words(asked)
    named = normalize(" ".join(f"{h.title} {h.heading}" for h in turn.cited))
    written = normalize(" ".join(h.content for h in turn.cited))
    naming = [w for w in words if normalize(w) in named]
    naming += [w for w in words if normalize(w) in written and w not in naming]
    return list(dict.fromkeys([*codes, *(naming or words[:1])]))


class Reading(NamedTuple):
    """A follow-up read with the conversation's topic: what is searched (the topic's words, up
    to three, find the passages the conversation is about) and what the answer is written for
    (its first word alone: the others are the earlier turns' words, and the sentences that
    repeat them are what was answered already, not what is asked now)."""

    searched: str
    focused: str


def in_context(question: str, history: list[EarlierTurn]) -> Reading | None:
    """The question with the earlier turns' topic put before it (the latest turn's first),
    what it points back with dropped; None when the turns name nothing the question does not
    already say."""
    text = unicodedata.normalize("NFKC", question).strip()
    said = normalize(text)
    # A question naming a code of its own asks about it instead of the earlier turns' codes
    # (「じゃあZP-2045は？」 after ZP-2041).
    replaced = bool(_CODE.search(text))
    words = [w for turn in reversed(history) for w in topic(turn)
             if normalize(w) not in said and not (replaced and _CODE.fullmatch(w))]
    words = list(dict.fromkeys(words))[:_TOPIC_WORDS]
    if not words:
        return None
    rest = _POINTER.sub("", question.strip(), count=1).strip() or question.strip()
    return Reading(f"{'・'.join(words)}について、{rest}", f"{words[0]}について、{rest}")


def _content_words(text: str) -> list[str]:
    """The words of `text` (NFKC) that are neither codes nor question words (何, 誰, どこ…)."""
    return [w for w in _WORD.findall(_CODE.sub(" ", text)) if not _ASKING.match(w)]


def speaks_of(question: str, passages: list[SearchHit]) -> bool:
    """Whether the passages a reading found write a piece (two characters, as the keyword leg
    reads text) of a word the question says itself (「漢字」 of 「漢字表記は何ですか」), or the
    question says none: a reading whose passages write nothing of the question's own words
    (「社内ロケット打ち上げ手順はどこですか」 read with 有給休暇) found the earlier topic, not what
    was asked."""
    own = [normalize(w) for w in _content_words(unicodedata.normalize("NFKC", question))]
    written = normalize(" ".join(h.content for h in passages))
    return not own or any(w[i:i + 2] in written for w in own for i in range(len(w) - 1))


def in_place(question: str, history: list[EarlierTurn]) -> str | None:
    """The latest turn's question as searched with what the question names put in the place
    of a word of its topic of the same kind: 「課長の出張日当はいくらですか」 for 「じゃあ課長
    は？」 after 「部長の出張日当はいくらですか」, 「育児休業と介護休業の申出は…」 for 「育児休業と
    介護休業だと？」 after 「育児休業の申出は…」, 「ZP-2041のLEDがE03で…」 for 「E03だったら？」
    after 「ZP-2041のLEDがE02で…」. None unless the question is such an ellipsis."""
    named = _IN_PLACE.match(unicodedata.normalize("NFKC", question).strip())
    if named is None or not history:
        return None
    asked = unicodedata.normalize("NFKC", history[-1].asked_as)
    items = [i for i in _ITEMS.split(named["named"]) if i]
    for word in topic(history[-1]):
        # The word as a noun the question asks of (部長の, 育児休業の), not a verb's stem
        # (退職するとき).
        place = re.search(f"{re.escape(word)}(?=[のはがをにでとも])", asked)
        if (place is not None and named["named"] != word
                and all(i == word or _same_kind(i, word) for i in items)):
            return f"{asked[:place.start()]}{named['named']}{asked[place.end():]}"
    return None


def _same_kind(named: str, word: str) -> bool:
    """Whether `named` may stand where `word` stood: codes of the same letters (E02, E03), or
    compounds of the same head (部長, 課長; 育児休業, 介護休業: a Japanese compound ends in
    its head)."""
    if _CODE.fullmatch(word):
        return bool(_CODE.fullmatch(named)) and _letters(named) == _letters(word)
    return len(named) > 1 and named[-1] == word[-1] and not _CODE.fullmatch(named)


def _letters(code: str) -> str:
    return re.sub(r"[^A-Za-z]", "", code).upper()


def exchanges(history: list[EarlierTurn]) -> list[Exchange]:
    """The earlier turns as a model is shown them: each question, with its answer where the
    caller may still read every passage that answer cited."""
    return [Exchange(turn.question, turn.answer) for turn in history]


def checked_rewrite(rewrite: str, question: str, history: list[EarlierTurn]) -> str | None:
    """A model's rewrite of `question` when it is one question made of the question's and the
    conversation's words (what the model was shown of it); None otherwise, or when it is the
    question itself."""
    lines = [line for line in rewrite.strip().splitlines() if line.strip()]
    if len(lines) != 1:
        return None
    text = unicodedata.normalize("NFKC", lines[0]).strip().strip("「」\"'")
    shown = normalize(" ".join([question, *(t.question for t in history),
                                *(CITATION.sub(" ", t.answer) for t in history
                                  if t.answer is not None)]))
    if (not text or normalize(text) == normalize(question)
            or any(normalize(w) not in shown for w in _WORD.findall(text))):
        return None
    return text
