"""The default answerer, offline and deterministic: the best sentences of the top passages, cited.

Each sentence of the first five passages (split at 。！？ and line breaks; a table row stays
whole, quoted under its table's header row) is scored by the question's terms it shares:
NFKC-normalized 2-grams of kanji and katakana runs, and whole Latin/digit tokens (codes,
numbers), which weigh more. A question asking for a quantity (何日, いくら, 何時間, 何%, …)
prefers sentences holding a number, and a passage's rank adds a small bonus. Up to three
sentences close to the best one are quoted verbatim, each followed by its passage's [n], so what
the answer says is what the documents say and verification passes. When no sentence shares
enough with the question, the answer is the not-found sentence.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

import msgspec

from kb_search.answerers.contract import NOT_FOUND, Answer, Passage, answer_from_text

__all__ = ["ExtractiveAnswerer"]

MAX_PASSAGES = 5
MAX_SENTENCES = 3
NEAR_BEST = 0.75  # a further sentence is quoted when it scores at least this share of the best
QUANTITY_BONUS = 2.0
RANK_BONUS = 0.5  # divided by the passage's rank: 0.5, 0.25, 0.17, ...
HEADING_SHARE = 0.5

_TERM = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff々〆ヵヶ]+|[ァ-ヺー]+|[a-z0-9]+(?:[-.][a-z0-9]+)*")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3})")
_SENTENCE = re.compile(r"[^。！？!?]+(?:[。！？!?]+[」』）)]*|$)")
_TABLE_RULE = re.compile(r"[|:\-\s]+")
_ENDS_SENTENCE = re.compile(r"[。！？!?」』）)]$")
_QUANTITY_QUESTION = re.compile(
    r"何(?:日|時間|時|分|秒|回|円|%|割|人|名|件|歳|年|か月|ヶ月|カ月|ヵ月|箇月|週|営業日|度|倍"
    r"|枚|個|泊|点|ページ|パーセント|キロ)|いくら|いくつ|どのくらい|どれくらい|どれほど|いつ"
    r"|上限|下限|金額|期限|期間|日数|回数"
)


class _Sentence(msgspec.Struct, frozen=True):
    text: str
    n: int  # the citation number of its passage
    rank: int  # its passage's position among the passages, 1-based
    order: int  # its position in reading order, to break ties
    heading: str = ""  # its passage's heading path and title, context for table rows
    title: str = ""


class ExtractiveAnswerer:
    """Quotes the sentences of the top passages that answer the question best."""

    name = "extractive"

    def answer(self, question: str, passages: list[Passage]) -> Answer:
        return self.finish("".join(self.stream(question, passages)))

    def stream(self, question: str, passages: list[Passage]) -> Iterator[str]:
        chosen = choose_sentences(question, passages)
        if not chosen:
            yield NOT_FOUND
            return
        for i, sentence in enumerate(chosen):
            last = i == len(chosen) - 1
            separator = "" if last or _ENDS_SENTENCE.search(sentence.text) else "\n"
            yield f"{sentence.text}[{sentence.n}]{separator}"

    def finish(self, text: str) -> Answer:
        return answer_from_text(text, self.name)


def choose_sentences(question: str, passages: list[Passage]) -> list[_Sentence]:
    """The 0-3 sentences to quote, best first; none when nothing shares enough with the question."""
    wanted = _terms(question)
    total = sum(wanted.values())
    if not total:
        return []
    threshold = max(min(2.0, total), 0.2 * total)
    asks_quantity = _QUANTITY_QUESTION.search(_normalize(question)) is not None
    scored = []
    for sentence in _sentences(passages[:MAX_PASSAGES]):
        has = _terms(sentence.text)
        # A table row (ZP-2041 | 3年) says what its heading (第2条（保証期間）) is about:
        # terms found only in the passage's heading or title count half.
        context = _terms(f"{sentence.heading} {sentence.title}")
        shared = sum(w if term in has else HEADING_SHARE * w if term in context else 0.0
                     for term, w in wanted.items())
        if shared < threshold:
            continue
        bonus = RANK_BONUS / sentence.rank
        if asks_quantity and re.search(r"\d", _normalize(sentence.text)):
            bonus += QUANTITY_BONUS
        scored.append((shared + bonus, sentence))
    scored.sort(key=lambda item: (-item[0], item[1].order))
    chosen: list[_Sentence] = []
    seen: set[str] = set()
    for score, sentence in scored:
        key = _normalize(sentence.text)
        if key in seen or score < NEAR_BEST * scored[0][0]:
            continue
        seen.add(key)
        chosen.append(sentence)
        if len(chosen) == MAX_SENTENCES:
            break
    return chosen


def _sentences(passages: list[Passage]) -> list[_Sentence]:
    """The quotable sentences of `passages`, in reading order; headings and fragments left out."""
    found = []
    for rank, passage in enumerate(passages, start=1):
        for text in _pieces(passage.content):
            if len(text) >= 4:
                found.append(_Sentence(text, passage.n, rank, len(found), passage.heading,
                                       passage.title))
    return found


def _pieces(content: str) -> Iterator[str]:
    """Sentences of prose; a table row whole, under its table's header row for context."""
    header = None
    for line in content.splitlines():
        stripped = line.strip()
        # Our parsers render table rows as cells joined by " | " (Markdown tables keep pipes).
        if not (stripped.startswith("|") or "\t" in stripped or " | " in stripped):
            header = None
            if not stripped.startswith("#"):  # a Markdown heading names a topic, not an answer
                yield from (piece.strip() for piece in _SENTENCE.findall(stripped))
        elif _TABLE_RULE.fullmatch(stripped):
            continue
        elif header is None:
            header = stripped
        else:
            yield f"{header}\n{stripped}"


def _normalize(text: str) -> str:
    return _THOUSANDS.sub("", unicodedata.normalize("NFKC", text).lower())


def _terms(text: str) -> dict[str, float]:
    """Weighted terms: kanji/katakana 2-grams (1), Latin words (2), numbers and codes (3)."""
    terms: dict[str, float] = {}
    for run in _TERM.findall(_normalize(text)):
        if run[0].isascii():
            terms[run] = 3.0 if any(c.isdigit() for c in run) else 2.0
            continue
        for i in range(len(run) - 1):
            bigram = run[i : i + 2]
            if "何" not in bigram:  # 何日 asks; it never answers
                terms[bigram] = 1.0
    return terms
