"""Which sentences of the passages hold the answer: what each sentence tells about itself, and a
fitted model of the probability that it holds what the question asks.

The question's terms are NFKC-normalized 2-grams of kanji and katakana runs and whole
Latin/digit tokens, which weigh more. Every sentence of the first passages is a candidate; a
table row (ZP-2041 | 3年) is read under its heading (第2条（保証期間）), which says what it is
about. The evidence of each (`FEATURES`):

- overlap: the share of the question's term weight the sentence holds, each term weighed by
  how few of the passages' sentences hold it (a term in every sentence tells nothing); a table
  row holds its heading's and title's terms too, since it means nothing without them;
- relative: that share against the best sentence's;
- context: the share found only in its passage's heading or title;
- neighbours: the share it holds with the sentences beside it in its passage (the question
  names the subject in one sentence, the answer follows in the next; a table row stands alone);
- phrasing: the share of the question's character 3-grams, kana included, it holds;
- wording: the share of the question's character 2-grams, kana included, it holds, each
  weighed by rarity as the terms are, against the best sentence's (kana carry the predicate:
  に似た香り, を出産した);
- asked_context: that share for the 2-grams of the few characters either side of the question
  word (長男の名前は何 → 長男の, 名前は): the words the answer stands beside;
- remainder: that share for the 2-grams the best-worded sentence lacks (a question joins two
  sentences: one names the subject, the next holds the answer);
- rank: 1 / its passage's rank;
- type: it holds the kind of thing asked for (a date for いつ, a number for 何人 or いくら, a
  name for 誰, a place for どこ), and new_type: one the question does not already hold;
- novelty: the share of its terms the question does not hold (an answer adds something);
- length: the logarithm of its length.

A conditional logit over them (one softmax over a question's candidate sentences) is fitted by
kb_eval/fit/sentence_model.py from the development sets with gold answers and committed in
sentences.json.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path

import msgspec

from kb_core.keywords import SCRIPT_RUN
from kb_search.answerers.answer import Passage
from kb_search.question_parts import split_question

__all__ = ["FEATURES", "MODEL_FILE", "Sentence", "SentenceModel", "Span",
           "candidate_sentences", "choose_sentences", "default_model", "passage_sentences",
           "wording"]

MODEL_FILE = Path(__file__).with_name("sentences.json")
MAX_PASSAGES = 5
MAX_SENTENCES = 3
FEATURES = ("overlap", "relative", "context", "neighbours", "phrasing", "wording",
            "asked_context", "remainder", "rank", "type", "new_type", "novelty", "length")

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3})")
_SENTENCE = re.compile(r"[^。！？!?]+(?:[。！？!?]+[」』）)]*|$)")
_TABLE_RULE = re.compile(r"[|:\-\s]+")
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+")
_HIRAGANA = re.compile(r"[ぁ-ゟ]+")
# A question word that asks (何も, 誰か, どこか and 幾何 do not; 何か国 does), and how many
# characters either side of it say what it asks about: the words the sentence model was fitted
# with (kb_search/question_parts.py also counts どちら・どれ, which ask for a choice).
_ASKS = re.compile(r"(?:(?<!幾)何|誰|だれ|どこ)(?!も|か(?![国月所]))|いつ|どの|どう|どんな|なぜ"
                   r"|いくら|いくつ")
_ASKED_CONTEXT = 6
# What a question asks for, and what a sentence holding it looks like (NFKC text). The first
# kind the question asks for is the one that counts.
_KANJI_NUMBER = "[一二三四五六七八九十百千万億]"
_ANSWER_TYPES = (
    (re.compile(r"いつ|何年|何月|何日|何世紀|何時代|年代|時期|西暦|何時|期限|期間"),
     re.compile(r"\d+(?:年|月|日|時|世紀)|元年|世紀|時代")),
    (re.compile(r"何(?:人|名|個|回|つ|%|倍|割|位|番|度|本|台|機|隻|両|枚|点|種|作|部|話|階|歳"
                r"|分|秒|円|件|泊|週|か月|ヶ月|カ月|ヵ月|箇月|営業日|ページ|パーセント|キロ|メートル"
                r"|トン|か国|ヶ国|カ国)|いくら|いくつ|どのくらい|どれくらい|どれほど|上限|下限|金額"
                r"|日数|回数"),
     re.compile(rf"\d|{_KANJI_NUMBER}+(?:人|名|個|回|つ|倍|割|位|番|度|本|台|歳|円|件)")),
    (re.compile(r"誰|だれ|何者|人物"),
     re.compile(r"[ァ-ヺ][ァ-ヺー・]{2,}|[\u4e00-\u9fff]{1,4}(?:氏|王|帝|公|卿|天皇|将軍)")),
    (re.compile(r"どこ|何県|何市|何町|何村|何国|どの国|何地方|何州|どの地域"),
     re.compile(r"[\u4e00-\u9fffァ-ヺー]+(?:県|市|町|村|国|州|島|地方|都|府|区|郡|大陸|半島)")),
)


# Where a sentence lies in its passage's content: [start, end) character offsets, one span for
# a sentence of prose, two for a table row (its header line, its own line).
Span = tuple[int, int]


class Sentence(msgspec.Struct, frozen=True):
    text: str
    n: int  # the citation number of its passage
    rank: int  # its passage's position among the passages, 1-based
    row: bool = False  # a table row under its header, not a sentence of prose
    heading: str = ""  # its passage's heading path and title, context for table rows
    title: str = ""
    spans: tuple[Span, ...] = ()  # where its text lies in its passage's content


class SentenceModel(msgspec.Struct, frozen=True):
    """A conditional logit over the candidate sentences of a question, and how many to quote."""

    features: list[str]  # of FEATURES, by name
    mean: list[float]
    scale: list[float]
    weights: list[float]
    # Quote the likeliest sentences until they hold this much of the probability (at most
    # MAX_SENTENCES, and a further one only while the answer stays within max_chars).
    coverage: float
    max_chars: int
    fitted_on: str  # what it was fitted from, and its held-out figures

    def scores(self, rows: Sequence[Sequence[float]]) -> list[float]:
        used = [FEATURES.index(name) for name in self.features]
        return [sum(w * (row[i] - m) / s for w, i, m, s in
                    zip(self.weights, used, self.mean, self.scale, strict=True))
                for row in rows]

    def pick(self, scores: Sequence[float], lengths: Sequence[int], parts: int = 1
             ) -> list[int]:
        """The sentences to quote, likeliest first, of those with these scores and lengths; at
        least one for each of the question's `parts` (QuestionSplit.asked) while they fit."""
        if not scores:
            return []
        top = max(scores)
        probability = [math.exp(s - top) for s in scores]
        total = sum(probability)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        chosen, held, length = [order[0]], probability[order[0]] / total, lengths[order[0]]
        for i in order[1:]:
            if ((held >= self.coverage and len(chosen) >= parts)
                    or len(chosen) == MAX_SENTENCES or length + lengths[i] > self.max_chars):
                break
            chosen.append(i)
            held += probability[i] / total
            length += lengths[i]
        return chosen


@cache
def default_model() -> SentenceModel:
    """The committed model (kb_eval/fit/sentence_model.py writes it)."""
    model = msgspec.json.decode(MODEL_FILE.read_bytes(), type=SentenceModel)
    if not set(model.features) <= set(FEATURES):
        raise ValueError(f"{MODEL_FILE} uses features {model.features}, not all of "
                         f"{list(FEATURES)}: refit it with `python -m kb_eval.fit sentences`")
    return model


def choose_sentences(question: str, passages: list[Passage],
                     model: SentenceModel | None = None) -> list[Sentence]:
    """The 1-3 sentences to quote, likeliest first. Whether the passages hold the answer was
    decided before, from retrieval's evidence for every answerer (kb_search/answerability.py);
    here the model only ranks, over every sentence: a sentence sharing no term with the question
    may be the answer (給料日 asked, 給与は毎月25日に支払う written; the name in one sentence,
    the year in the next). Empty only for a question without a content term or passages without
    a sentence."""
    model = model or default_model()
    candidates, rows = candidate_sentences(question, passages)
    return [candidates[i] for i in model.pick(model.scores(rows),
                                              [len(c.text) for c in candidates],
                                              split_question(question).asked)]


def candidate_sentences(
    question: str, passages: list[Passage]
) -> tuple[list[Sentence], list[list[float]]]:
    """The sentences of the first passages, in reading order, each once, and the `FEATURES` of
    each."""
    wanted = _terms(question)
    everything = _sentences(passages[:MAX_PASSAGES])
    if not wanted or not everything:
        return [], []
    contexts = [_terms(f"{s.heading} {s.title}") for s in everything]
    own = [_terms(s.text) for s in everything]
    # A table row is read under its heading (第2条（保証期間） | ZP-2041 | 3年): its terms count
    # as the row's own; a sentence of prose says what it says.
    held = [o | c if s.row else o for s, o, c in zip(everything, own, contexts, strict=True)]
    # A term held by every sentence tells nothing about which one answers.
    rarity = {t: w * math.log((len(everything) + 1) / (0.5 + sum(t in h for h in held)))
              for t, w in wanted.items()}
    rare_total = sum(rarity.values()) or 1.0
    overlap = [sum(r for t, r in rarity.items() if t in h) / rare_total for h in held]
    best = max(overlap) or 1.0
    normalized = _normalize(question)
    asked = _trigrams(normalized)
    texts = [_normalize(s.text) for s in everything]
    words, grams = _bigrams(normalized), [_bigrams(text) for text in texts]
    worded = _weighed_shares(words, grams)
    best_worded = max(worded) or 1.0
    remainder = _weighed_shares(words - grams[worded.index(max(worded))], grams)
    asked_context = _weighed_shares(_asked_context(normalized), grams)
    kind = next((holds for asks, holds in _ANSWER_TYPES if asks.search(normalized)), None)
    in_question = set(kind.findall(normalized)) if kind else set()
    candidates, rows, seen = [], [], set()
    for i, sentence in enumerate(everything):
        text = texts[i]
        if text in seen:  # the same words quoted twice say nothing more
            continue
        seen.add(text)
        has, context = held[i], contexts[i]
        beside = set(has)
        for j in (i - 1, i + 1):  # a table's rows are separate facts, not a story read on
            if (0 <= j < len(everything) and everything[j].n == sentence.n
                    and not sentence.row and not everything[j].row):
                beside |= held[j].keys()
        kinds = set(kind.findall(text)) if kind else set()
        candidates.append(sentence)
        rows.append([
            overlap[i],
            overlap[i] / best,
            sum(r for t, r in rarity.items() if t in context and t not in has) / rare_total,
            sum(r for t, r in rarity.items() if t in beside) / rare_total,
            len(asked & _trigrams(text)) / (len(asked) or 1),
            worded[i] / best_worded,
            asked_context[i],
            remainder[i],
            1.0 / sentence.rank,
            float(bool(kinds)),
            float(bool(kinds - in_question)),
            sum(1 for t in has if t not in wanted) / (len(has) or 1),
            math.log(len(sentence.text)),
        ])
    return candidates, rows


def passage_sentences(passage: Passage, rank: int = 1) -> list[Sentence]:
    """The sentences of one passage, in reading order, each knowing where it lies in the
    passage's content; headings and fragments left out."""
    return [Sentence(text, passage.n, rank, row, passage.heading, passage.title, spans)
            for text, row, spans in _pieces(passage.content) if len(text) >= 4]


def wording(text: str) -> set[str]:
    """The character 2-grams that say what `text` is about (NFKC, kana runs but not hiragana
    alone), to compare a sentence with another's wording."""
    return _bigrams(_normalize(text))


def _sentences(passages: list[Passage]) -> list[Sentence]:
    """The sentences of `passages`, in reading order; headings and fragments left out."""
    return [sentence for rank, passage in enumerate(passages, start=1)
            for sentence in passage_sentences(passage, rank)]


def _pieces(content: str) -> Iterator[tuple[str, bool, tuple[Span, ...]]]:
    """Sentences of prose; a table row whole, under its table's header row for context; each
    with whether it is a row and where its text lies in `content`."""
    header: Span | None = None
    for start, line in _lines(content):
        stripped = line.strip()
        where = _stripped_span(line, start)
        # Our parsers render table rows as cells joined by " | " (Markdown tables keep pipes).
        if not (stripped.startswith("|") or "\t" in stripped or " | " in stripped):
            header = None
            if not stripped.startswith("#"):  # a Markdown heading names a topic, not an answer
                for piece in _SENTENCE.finditer(line):
                    span = _stripped_span(piece.group(), start + piece.start())
                    if span[0] < span[1]:  # white space between sentences is none of them
                        yield content[span[0]:span[1]], False, (span,)
        elif _TABLE_RULE.fullmatch(stripped):
            continue
        elif header is None:
            header = where
        else:
            text = f"{content[header[0]:header[1]]}\n{stripped}"
            yield text, True, (header, where)


def _lines(content: str) -> Iterator[tuple[int, str]]:
    """Each line of `content` without its line break, and where it starts."""
    start = 0
    for line in content.splitlines(keepends=True):
        yield start, line.splitlines()[0]
        start += len(line)


def _stripped_span(text: str, start: int) -> Span:
    """Where `text`, found at `start`, lies once white space is stripped from both ends."""
    lead = len(text) - len(text.lstrip())
    return start + lead, start + lead + len(text.strip())


def _normalize(text: str) -> str:
    return _THOUSANDS.sub("", unicodedata.normalize("NFKC", text).lower())


def _trigrams(text: str) -> set[str]:
    text = _SPACE.sub("", text)
    return {text[i : i + 3] for i in range(len(text) - 2)}


def _bigrams(text: str) -> set[str]:
    """Character 2-grams within runs of letters and digits, kana included but not 2-grams of
    hiragana alone (のは, ました say nothing of what a sentence is about)."""
    return {gram for run in _WORD.findall(text) for i in range(len(run) - 1)
            if not _HIRAGANA.fullmatch(gram := run[i : i + 2])}


def _asked_context(question: str) -> set[str]:
    """The 2-grams either side of each question word (none without one): a question may ask
    two things (何日前までに申請し、いつ何日付与される)."""
    return {g for found in _ASKS.finditer(question)
            for side in (question[max(0, found.start() - _ASKED_CONTEXT) : found.start()],
                         question[found.end() : found.end() + _ASKED_CONTEXT])
            for g in _bigrams(side) if "何" not in g}


def _weighed_shares(wanted: set[str], held: list[set[str]]) -> list[float]:
    """The share of `wanted` each of `held` holds, a 2-gram weighed by how few hold it. Summed
    in sorted order: a set's order changes with each process's string hashing, and so would the
    sums' last bits, and with them a choice between sentences that tie."""
    weight = {g: math.log((len(held) + 1) / (0.5 + sum(g in h for h in held)))
              for g in sorted(wanted)}
    total = sum(weight.values()) or 1.0
    return [sum(w for g, w in weight.items() if g in h) / total for h in held]


def _terms(text: str) -> dict[str, float]:
    """Weighted terms: kanji/katakana 2-grams (1), Latin words (2), numbers and codes (3)."""
    terms: dict[str, float] = {}
    for run in SCRIPT_RUN.findall(_normalize(text)):
        if run[0].isascii():
            terms[run] = 3.0 if any(c.isdigit() for c in run) else 2.0
            continue
        for i in range(len(run) - 1):
            bigram = run[i : i + 2]
            if "何" not in bigram:  # 何日 asks; it never answers
                terms[bigram] = 1.0
    return terms
