"""The named things a passage or a question speaks of, and the references between them.

Rule-based and offline: codes (ZP-2041, QC-2031, KP-2041-03) by the planner's code rule;
documents named by their kind (〇〇規程, 〇〇一覧, 〇〇台帳, 〇〇報告書); articles (第N条) tied
to the regulation named before them on the same line, else to the one the passage's title
names; organisation units (〇〇部, 〇〇課, 〇〇工場, 〇〇センター) and roles (部長, 工場長,
品質責任者). Each is keyed by its normalised name (NFKC, case-folded, the planner's code rule,
without 「・」 or spaces), so ＺＰ‐２０４１ and zp2041 are one entity, and two codes that differ
in a digit are two.

A passage's references are the pairs of entities that one table row names together, or one
sentence that refers (「〜による」「〜を参照」「関連報告書」); entities merely named in one passage
are related too, but that is read from the mentions, not stored twice.

The index (kb_pipeline's entity_graph stage) and questions (the graph leg) use the same rules.
"""

from __future__ import annotations

import re
from itertools import combinations

import msgspec

from kb_core.keywords import normalize

__all__ = [
    "CODE",
    "ENTITIES_VERSION",
    "Entity",
    "PassageGraph",
    "Reference",
    "entities_of",
    "entity_key",
    "could_name",
    "name_candidates",
    "passage_graph",
]

# Part of the pipeline version: changing what is extracted means re-indexing.
ENTITIES_VERSION = "1"

# A code in normalized text: letters, then digits, joined by dashes (zp-2041, kp-2041-03).
CODE = re.compile(r"(?<![a-z0-9])[a-z]{1,6}(?:-[a-z0-9]+)*-?\d{2,}[a-z0-9]*(?:-[a-z0-9]+)*")
# The characters of a name: kanji and katakana, without the 「・」 the keywords' content runs
# keep (kb_core/keywords.py), which here joins names in a list (総務・人事部); a document's name
# may hold one (組織図・部署連絡先一覧), which _DOCUMENT allows.
_C = r"\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u30a1-\u30fa\u30fc"
_DOCUMENT_KINDS = "規程|規定|規則|細則|要領|ガイド|マニュアル|一覧|台帳|説明書|報告書|管理表|議事録"
_DOCUMENT = re.compile(rf"[{_C}・]*[{_C}][{_C}・]*?(?:{_DOCUMENT_KINDS})(?=第|[^{_C}]|$)")
_ARTICLE = re.compile(r"第(\d+)条")
# An organisation unit: at least two characters before its kind (品質保証部, 経理課, 湖西工場),
# which keeps 全部, 一部, 本部 out.
_UNIT_KINDS = "本部|部|課|室|工場|営業所|センター"
_UNIT = re.compile(rf"[{_C}]{{2,}}?(?:{_UNIT_KINDS})(?=長|[^{_C}]|$)")
# 〜部 after a word of place or position names a part or a region, not a department: 内部,
# 南東部, 先端部, 頭部.
_PART = re.compile(r"[内外上下東西南北中前後底側頭胸腹脚背全一細端口首尾]部$")
_ROLE = re.compile(
    rf"[{_C}]*責任者|代表取締役社長|取締役|本部長|工場長|部長|課長|室長|所長|係長|主任")
# A sentence that points elsewhere: what it names together is a reference, not a co-mention.
_REFERS = re.compile(
    r"による|によって|に基づ|に従|に定め|を参照|参照|準用|関連報告書|関連文書|関連記録")
_TITLE = re.compile(r"^【([^】]*)】")
_SPACED = re.compile(rf"(?<=[{_C}])\s+(?=[{_C}])")
_DROP = re.compile(r"[・\s]")
# What a name is written with in a normalised question (name_candidates): kanji, kana, Latin
# letters, digits and the dash of a code.
_NAME_RUN = re.compile(rf"[{_C}\u3041-\u3096a-z0-9-]+")
_WORD_EDGE = re.compile(r"[a-z0-9-]{2}")  # two characters of one Latin word or code
_LETTER = re.compile(r"[^\W\d_]")
# The longest name a question is searched for, and how many names at most: a question of 2,000
# characters (KB_MAX_QUESTION_CHARS) has 30,000 substrings of up to 16.
NAME_CHARS = 16
CANDIDATES = 2000
# Words before a name that point rather than name: 同規程 is the passage's own, 当社湖西工場
# is 湖西工場, 関連報告書 is a column; what is left must still be a name. 本 points only before
# the bare kind (本規程, 本報告書): 本社工場 is a name.
_POINTER = re.compile(r"^(?:当社|弊社|該当|関連|同|各|当|該)")
_THIS = re.compile(rf"^本(?:{_DOCUMENT_KINDS}|{_UNIT_KINDS})$")


class Entity(msgspec.Struct, frozen=True):
    key: str  # the normalised name: the entity's id in every generation
    kind: str  # code, document, article, unit, role; `thing` from the LLM extractor only
    name: str  # as first written
    description: str | None = None  # what the passage says of it: the LLM extractor's only


class Reference(msgspec.Struct, frozen=True):
    source: str  # entity keys
    target: str
    kind: str  # row: one table row names both; reference: one referring sentence does; llm
    description: str | None = None  # the LLM extractor's, of an `llm` reference


class PassageGraph(msgspec.Struct, frozen=True):
    entities: list[Entity]
    references: list[Reference]


def entity_key(name: str) -> str:
    return _DROP.sub("", normalize(name))


def could_name(key: str) -> bool:
    """Whether `key` could be an entity's: two characters at least, a letter among them (2024
    and 5,000 are numbers, not things)."""
    return len(key) >= 2 and _LETTER.search(key) is not None


def name_candidates(text: str) -> list[str]:
    """Every key a name written in `text` (a question) could have: the substrings of its runs
    of name characters that could name one (could_name), up to NAME_CHARS long, a word of
    Latin letters and digits whole (zp-2041 is not in zp-20415), at most CANDIDATES of them,
    the first first. The graph leg looks them up among the entities the rules cannot read in
    a question: the LLM extractor's (kb_pipeline/graph_llm.py), known by name alone."""
    found: dict[str, None] = {}
    for run in _NAME_RUN.findall(entity_key(text)):
        inside = {i for i in range(1, len(run)) if _WORD_EDGE.fullmatch(run[i - 1:i + 1])}
        for start in (i for i in range(len(run)) if i not in inside):
            for end in range(start + 2, min(start + NAME_CHARS, len(run)) + 1):
                if end in inside:  # a word's end is not here
                    continue
                name = run[start:end]
                if could_name(name):
                    found[name] = None
                    if len(found) == CANDIDATES:
                        return list(found)
    return list(found)


def _named(name: str, rule: re.Pattern[str]) -> str | None:
    """`name` without a pointing word before it, if what is left is still a name."""
    if _THIS.match(name):
        return None
    rest = _POINTER.sub("", name)
    return rest if rest == name or rule.fullmatch(rest) else None


def _found(line: str, default_regulation: Entity | None) -> list[tuple[int, Entity]]:
    """The entities of one line of normalized text (kb_core.keywords.normalize), with their
    positions."""
    found: list[tuple[int, Entity]] = []
    for m in CODE.finditer(line):
        found.append((m.start(), Entity(m.group(), "code", m.group().upper())))
    documents = [(m.start(), m.end(), m.group()) for m in _DOCUMENT.finditer(line)]
    for start, _, name in documents:
        if (named := _named(name, _DOCUMENT)) is not None:
            found.append((start, Entity(entity_key(named), "document", named)))
    for m in _ARTICLE.finditer(line):
        before = [name for _, end, name in documents if end <= m.start()]
        regulation = before[-1] if before else default_regulation and default_regulation.name
        if regulation:
            name = f"{regulation}第{m.group(1)}条"
            found.append((m.start(), Entity(entity_key(name), "article", name)))
    for m in _UNIT.finditer(line):
        if _PART.search(m.group()):
            continue
        if (named := _named(m.group(), _UNIT)) is not None:
            found.append((m.start(), Entity(entity_key(named), "unit", named)))
    for m in _ROLE.finditer(line):
        found.append((m.start(), Entity(entity_key(m.group()), "role", m.group())))
    return found


def entities_of(text: str) -> list[Entity]:
    """The entities a question (or any text) names, once each, in order."""
    line = normalize(text)
    found = sorted(_found(line, None), key=lambda pair: pair[0])
    return list({entity.key: entity for _, entity in reversed(found)}.values())[::-1]


def passage_graph(text: str) -> PassageGraph:
    """A passage's entities and references. `text` is the passage as indexed: 【title】, its
    heading path and its content; an article with no regulation named before it belongs to the
    regulation its title names."""
    lines = normalize(text).splitlines() or [""]
    title = _TITLE.match(lines[0])
    # The title as written and as one name (人事評価制度 運用ガイド is one document; 本社工場
    # 検査記録 names 本社工場), then the heading path, then the content.
    titles = [title.group(1), _SPACED.sub("", title.group(1))] if title else []
    lines = [*titles, lines[0][title.end():] if title else lines[0], *lines[1:]]
    body = len(titles) + 1  # the first line after the heading path
    own = next((e for line in titles[::-1] for _, e in _found(line, None)
                if e.kind == "document"), None)
    entities: dict[str, Entity] = {}
    references: dict[tuple[str, str, str], Reference] = {}
    # What the passage's heading names (its article, its section's subject) is what a
    # referring sentence under it refers from.
    heading = [e.key for _, e in _found(lines[body - 1], own)] if title else []
    for number, line in enumerate(lines):
        kind = "row" if "|" in line else None
        for sentence in re.split(r"(?<=。)", line) if kind is None else [line]:
            found = [e for _, e in sorted(_found(sentence, own), key=lambda p: p[0])]
            for entity in found:
                entities.setdefault(entity.key, entity)
            pair_kind = kind or ("reference" if _REFERS.search(sentence) else None)
            if pair_kind is None:
                continue
            subject = heading if number >= body else []
            named = list(dict.fromkeys(
                [*subject, *(e.key for e in found if e.kind != "role")]))
            for source, target in combinations(named, 2):
                references.setdefault((source, target, pair_kind),
                                      Reference(source, target, pair_kind))
    return PassageGraph(list(entities.values()), list(references.values()))
