"""What a question asks of a table: which columns it names (a header, or a synonym of one), which
rows (a key cell, or an item a cell lists), which conditions (「状態が販売中の」「単価が10,000円
以上の」) and which kind of answer: one cell, the row with the largest or smallest value of a
column, how many rows meet the conditions, or which of two rows is larger.

Everything is read from the question and the table alone: no list of the company's words beyond
the synonym dictionary, no entry written for a question."""

from __future__ import annotations

import operator
import re
import unicodedata
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Literal

from kb_search.tables.stored import StoredTable

__all__ = ["Condition", "Kind", "Mention", "TableQuestion", "bare", "cell_number", "column_head",
           "normalized", "numeric_column", "read_question"]

Kind = Literal["cell", "extreme", "count", "comparison"]

# Column names are compared without what qualifies them in parentheses: 「日当（1日あたり）」.
_PARENTHESES = re.compile(r"[（(][^（）()]*[）)]")
# A cell lists items: 「北米、欧州、オセアニア」「係長・主任」「SUS316 / PPS」.
_ITEM_SEPARATORS = re.compile(r"[、，,／/・;；]")
_NUMBER = re.compile(r"[-+−]?\d[\d,]*(?:\.\d+)?")
_LEADING_NUMBER = re.compile(r"[¥$±]?(?P<n>[-+]?\d[\d,]*(?:\.\d+)?)")
# 「10,000円以上」「5%未満」「2.0を超える」: a number, its unit, how it bounds.
_BOUND = re.compile(r"(?<![A-Za-z\d.,\-])(?P<number>\d[\d,]*(?:\.\d+)?)\s*"
                    r"(?P<unit>[^\s\d、。がのはをにで]{0,6}?)"
                    r"(?P<op>以上|以下|未満|を超え|超|より(?:大き|多|高|長|重|小さ|少な|低|短|軽))?"
                    r"(?=[のがでをはもな、。？?]|$)")
_OPS = {"以上": ">=", "以下": "<=", "未満": "<", "を超え": ">", "超": ">"}
_COMPARISONS = {"=": operator.eq, ">=": operator.ge, "<=": operator.le, "<": operator.lt,
                ">": operator.gt}
_MORE = ("大き", "多", "高", "長", "重", "広", "遠", "新し", "遅")
_LESS = ("小さ", "少な", "低", "短", "軽", "狭", "近", "古", "安", "早")
# 「最大」「最安」 mark an extreme only standing alone (「最大のものは」), not as the head of a
# noun (「最大可搬質量」 is a quantity's name).
_EXTREME = re.compile(r"(?:いちばん|一番|最も|もっとも)(?P<word>[^\s、。]{1,4})"
                      r"|(?P<most>最大|最高|最多|最長|最重|最小|最低|最少|最短|最軽|最安)"
                      r"(?![\u4e00-\u9fff\u30a0-\u30ff])")
_COUNT = re.compile(r"何(?:件|社|か所|ヵ所|ヶ所|カ所|箇所|機種|品目|名|人|台|種類|種|個|本|部署|行|"
                    r"項目|地域|区分|つ|拠点|店|回|製品|型式|品番|部品|コース|等級|室|棟|校|枚)"
                    r"|いくつ(?:あ|の|存在|登録|該当)|[のな]数(?:を|は|が|って|$)")
# A note that defines a category: 「管理職とは課長以上（G6以上）をいう。」
_DEFINITION = re.compile(r"(?P<category>[^\s、。「」\d]{1,12}?)とは(?P<meaning>.+?)を(?:いう|指す)")
_WORDS = re.compile(r"\w{2,}")
_RANGE_WORDS = re.compile(r"以上|以下|未満|を超える|超")
# Rows counted, not a quantity asked: 「いくつありますか」「何件登録されていますか」「の数は」.
_ROWS_COUNTED = re.compile(r"(?:いくつ|何[^\s、。?？]{1,3}?)(?:あり|ある|載って|登録|掲載|存在)"
                           r"|[のな]数(?:を|は|が|って|$)")
_DIRECTION_REACH = 12  # characters after 「いちばん」 that may say which way
_COMPOUND = re.compile(r"[\u4e00-\u9fff\u30a0-\u30ffー]")
_QUALIFIES = re.compile(r"[内外中後前以超未](?![0-9])")
_WHICH = re.compile(r"どちら|どっち|いずれ")


def normalized(text: str) -> str:
    """NFKC, lower case, no white space: how questions and cells are compared."""
    return "".join(unicodedata.normalize("NFKC", text).lower().split())


def cell_number(cell: str) -> Decimal | None:
    """The number a cell opens with (「¥39,800」 → 39800, 「25%（…）」 → 25), if it opens with
    one: 「ZP-2041」 states no number."""
    match = _LEADING_NUMBER.match(normalized(cell).replace("−", "-"))
    if match is None:
        return None
    try:
        return Decimal(match["n"].replace(",", ""))
    except InvalidOperation:
        return None


@dataclass(frozen=True)
class Mention:
    """Where the question names something of a table: its characters [start, end)."""

    start: int
    end: int

    def inside(self, other: Mention) -> bool:
        return other.start <= self.start and self.end <= other.end and self != other


@dataclass(frozen=True)
class Condition:
    """Rows kept for a count or an extreme: `column` equal to (or holding, for a listing) a
    text, or bounded by a number or by the row's value in an `other` column (an LLM's tool
    call, kb_search/tables/tools.py: 在庫数 < 発注点)."""

    column: int
    op: Literal["=", "has", ">=", "<=", "<", ">"]
    text: str  # as the question (or the tool call) writes it
    number: Decimal | None = None
    other: int | None = None

    def holds(self, cells: list[str]) -> bool:
        cell = cells[self.column] if self.column < len(cells) else ""
        if self.other is not None:
            value, bound = cell_number(cell), cell_number(cells[self.other])
            return (value is not None and bound is not None
                    and _COMPARISONS[self.op](value, bound))
        if self.number is not None:
            value = cell_number(cell)
            return value is not None and _COMPARISONS[self.op](value, self.number)
        if self.op == "=":
            return normalized(cell) == normalized(self.text)
        return normalized(self.text) in {normalized(i) for i in _items(cell)}


@dataclass
class TableQuestion:
    """A question read against one table."""

    table: StoredTable
    kind: Kind
    columns: list[int]  # the columns named, the asked one first
    rows: list[int] = field(default_factory=list)  # indexes into table.rows named by a cell
    conditions: list[Condition] = field(default_factory=list)
    largest: bool = True  # for an extreme or a comparison
    score: float = 0.0  # how much of the question the table accounts for
    ambiguous_columns: list[int] = field(default_factory=list)
    # The rows named by a cell other than their key, with the text the question wrote for it
    # (「QC-2031」 of the row keyed NC-2510-04): an answer names the row by both.
    named_by: dict[int, str] = field(default_factory=dict)


def read_question(question: str, table: StoredTable, expansions: list[str]
                  ) -> TableQuestion | None:
    """`question` read against `table` (`expansions`: the synonym dictionary's other forms of
    its words), or None when it names none of the table's columns. A cell question that names
    no row is returned too, with no rows: it tells a near miss."""
    q = normalized(question)
    named = _named_columns(q, table, [normalized(e) for e in expansions])
    if not named:
        # 「拠点別在庫一覧に載っている品目はいくつありますか」: the rows of a table it names.
        if _ROWS_COUNTED.search(q) and _named_whole(q, table):
            return TableQuestion(table=table, kind="count", columns=[])
        return None
    named, qualified, ambiguous = _qualified(q, table, named)
    columns = [c for c, _ in named]
    spans = [m for _, m in named if m is not None]
    rows, row_spans, values = _named_rows(q, table, spans)
    masked = _masked(q, [*spans, *row_spans])
    keyed = any(c == 0 and sum(1 for _, cc, mm in values if (cc, mm) == (c, m)) == 1
                for _, c, m in values)
    numbers_end = [m.end for c, m in named if m is not None and numeric_column(table, c)]
    kind, largest = _kind(masked, len(rows), keyed, numbers_end)
    # A named column without a row or a computation is a cell question with no row (answered
    # by no cell; kept to tell a near miss); of two columns, a named row asks for its value
    # (「配偶者の出産 | 3日」).
    kind = kind or "cell"
    if kind == "cell":
        # A column that qualifies another word (「製品の回収」) is not asked.
        # ... unless what it qualifies is the row named after it (「3年6か月の…付与日数」).
        columns = [c for c, m in named if m is None or _asked(q, m, _known(table))
                   or any(r.start > m.end for r in row_spans)]
    if kind == "cell" and not columns and not rows:
        return None
    if kind == "cell" and rows:
        # The columns asked are those that did not name the row (「ZXシリーズ」 names a row
        # through the シリーズ column; its cell there is no answer).
        naming = {c for r, c, _ in values if r == rows[0]}
        columns = [c for c in columns if c not in naming] or (
            [1 - min(naming)] if len(table.columns) == 2 and naming <= {0, 1} else [])
        if not columns:
            return None
    conditions = (_conditions(q, table, named, values) if kind in ("count", "extreme") else [])
    if kind == "count" and not conditions and not _ROWS_COUNTED.search(q):
        # 「承認されたのは何名ですか」 of a table of approvals per grade asks a sum, not how many
        # rows it has: counting every row needs the question to say so (「何件ありますか」).
        return None
    if kind in ("count", "extreme"):
        rows = []  # a cell the question names there is a condition, not the row asked
    # Each stretch of the question counts once, however many columns it names; a cell text a
    # condition takes (「仕入先が中央ベアリングの」) counts too.
    used = set(row_spans) | ({m for _, _, m in values} if kind in ("count", "extreme") else set())
    score = (sum((m.end - m.start) for m in set(spans)) + sum(m.end - m.start for m in used)
             + qualified)
    said = {r: q[m.start:m.end] for r, c, m in values if c != 0 and r in rows}
    return TableQuestion(table=table, kind=kind, columns=columns, rows=rows,
                         conditions=conditions, largest=largest, score=score,
                         ambiguous_columns=ambiguous, named_by=said)


def _named_whole(q: str, table: StoredTable) -> bool:
    """Whether the question names the table itself: its sheet, or its document's title."""
    sheet = (table.location or "").removeprefix("シート: ")
    return any(len(n) >= 2 and n in q for n in (normalized(sheet), normalized(table.title)))


def _named_columns(q: str, table: StoredTable, expansions: list[str]
                   ) -> list[tuple[int, Mention | None]]:
    """The columns whose name (its first header part, what it measures) the question writes,
    or a synonym of it; a name written inside a longer one the question also names does not
    count (「6か月」 inside 「3年6か月」). The longest first."""
    found: list[tuple[int, Mention | None, int]] = []
    known = _known(table)
    for index in range(len(table.columns)):
        head = column_head(table, index)
        if not head:
            continue
        at = q.find(head)
        if at >= 0 and _stands_alone(q, at, known):
            found.append((index, Mention(at, at + len(head)), len(head)))
        elif any(head in e for e in expansions) or _close(head, q):
            found.append((index, None, len(head) - 1))
    exact = [m for _, m, _ in found if m is not None]
    if exact:  # a name written out beats names only nearly written (「1年6か月」 by 「3年6か月」)
        found = [f for f in found if f[1] is not None]
    kept = [(i, m, n) for i, m, n in found if m is None or not any(m.inside(o) for o in exact)]
    kept.sort(key=lambda item: -item[2])
    return [(i, m) for i, m, _ in kept]


def _qualified(q: str, table: StoredTable, named: list[tuple[int, Mention | None]]
               ) -> tuple[list[tuple[int, Mention | None]], int, list[int]]:
    """Columns under one merged header (日当：役員, 日当：管理職 …) told apart by the rest of
    their header: written in the question, or a category the table's notes define by a word the
    question writes (「管理職とは課長以上をいう」 and 「課長が…」). Returns the columns kept,
    the length of the qualifiers that decided, and the columns still ambiguous."""
    by_head: dict[str, list[tuple[int, Mention | None]]] = {}
    for column, mention in named:
        by_head.setdefault(column_head(table, column), []).append(
            (column, mention))
    kept, qualified, ambiguous = [], 0, []
    for group in by_head.values():
        if len(group) == 1:
            kept.extend(group)
            continue
        fitting = [(c, m, n) for c, m in group
                   if (n := _qualifier_fit(q, table, table.columns[c].split("：")[1:]))]
        if len(fitting) == 1:
            column, mention, length = fitting[0]
            kept.append((column, mention))
            qualified += length
        else:
            kept.extend(group)
            ambiguous.extend(c for c, _ in (fitting or group))
    return kept, qualified, ambiguous


def _qualifier_fit(q: str, table: StoredTable, qualifiers: list[str]) -> int:
    """How much of the question a column's qualifiers account for: each written in it, or
    defined by a note through a word the question writes; 0 when one of them is neither."""
    fit = 0
    for qualifier in qualifiers:
        text = bare(qualifier)
        if text and text in q:
            fit += len(text)
            continue
        words = [w for note in table.notes if (d := _DEFINITION.search(normalized(note)))
                 and bare(d["category"]) == text
                 for w in _WORDS.findall(_RANGE_WORDS.sub(" ", d["meaning"]))]
        said = [w for w in words if w in q]
        if not said:
            return 0
        fit += max(map(len, said))
    return fit


def _known(table: StoredTable) -> str:
    """The table's own words: its caption, sheet, document title and column names."""
    return normalized(f"{table.caption}{table.location or ''}{table.title}"
                      f"{''.join(table.columns)}")


def _stands_alone(q: str, at: int, known: str) -> bool:
    """Whether a column's name at `at` is the thing asked, not the tail of a longer name: the
    kanji and katakana written right before it (「可搬」 of 「最大可搬質量」) must be words of
    the table itself (「地域」 of 「地域加算額」, its caption being 「地域加算」)."""
    start = at
    while start > 0 and _COMPOUND.match(q[start - 1]):
        start -= 1
    return start == at or q[start:at] in known


def _asked(q: str, mention: Mention, known: str) -> bool:
    """Whether a column named in a cell question is what it asks, not a word that qualifies
    another (「製品の回収」, 「保証期間内」); a word of the table itself may follow (「大阪の
    在庫数」 of 拠点別在庫一覧)."""
    rest = q[mention.end:]
    if _QUALIFIES.match(rest):
        return False
    if not rest.startswith("の"):
        return True
    end = 1
    while end < len(rest) and _COMPOUND.match(rest[end]):
        end += 1
    return end == 1 or any(rest[1:i] in known for i in range(3, end + 1))


def bare(text: str) -> str:
    """A name as questions write it: without what parentheses qualify it with, normalized
    (「日当（1日あたり）」 → 日当)."""
    return normalized(_PARENTHESES.sub("", text)) or normalized(text)


def column_head(table: StoredTable, column: int) -> str:
    """What a column measures, as a question writes it: its top header, bare."""
    return bare(table.columns[column].split("：")[0])


def _close(head: str, q: str) -> bool:
    """Whether the question writes the name with a particle between its words: 「宿泊費の上限」
    for 「宿泊費上限」 (three quarters of its character pairs, the name at least 3 long)."""
    if len(head) < 3:
        return False
    pairs = {head[i:i + 2] for i in range(len(head) - 1)}
    return sum(p in q for p in pairs) >= 0.75 * len(pairs)


def _items(cell: str) -> list[str]:
    """What a cell names: itself, and each item it lists without its parenthesised note."""
    items = [cell]
    plain = _PARENTHESES.sub("", cell).strip()
    for part in [plain, *_ITEM_SEPARATORS.split(plain)]:
        part = part.strip()
        if part and part not in items:
            items.append(part)
    return items


def _named_rows(q: str, table: StoredTable, column_spans: list[Mention]
                ) -> tuple[list[int], list[Mention], list[tuple[int, int, Mention]]]:
    """The rows a cell of which the question writes, the key column first; a text found in
    several rows of one column is a value they share (a condition), not a row's name. Returns
    the rows, their mentions, and every (row, column, mention) found."""
    hits: list[tuple[int, int, Mention]] = []
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            if not cell or cell_number(cell) is not None and _NUMBER.fullmatch(normalized(cell)):
                continue
            for item in _items(cell):
                text = normalized(item)
                if len(text) < 2 and not text.isalnum():
                    continue
                at = q.find(text)
                if at >= 0:
                    mention = Mention(at, at + len(text))
                    if not any(mention.inside(s) or mention == s for s in column_spans):
                        hits.append((r, c, mention))
    # Keep only the longest mention where several overlap (「係長」 in 「係長・主任」's row).
    hits = [h for h in hits if not any(h[2].inside(o[2]) for o in hits)]
    by_text: dict[tuple[int, Mention], set[int]] = {}
    for r, c, m in hits:
        by_text.setdefault((c, m), set()).add(r)
    named = sorted({r for (c, _), rows in by_text.items() if len(rows) == 1 for r in rows},
                   key=lambda r: min(m.start for rr, _, m in hits if rr == r))
    spans = [m for (c, m), rows in by_text.items() if len(rows) == 1]
    return named, spans, hits


def numeric_column(table: StoredTable, column: int) -> bool:
    """Whether most of a column's cells state a number."""
    values = [row.cells[column] for row in table.rows if row.cells[column]]
    return bool(values) and sum(cell_number(v) is not None for v in values) * 2 > len(values)


def _masked(q: str, spans: list[Mention]) -> str:
    chars = list(q)
    for span in spans:
        for i in range(span.start, span.end):
            chars[i] = "□"
    return "".join(chars)


def _kind(masked: str, named_rows: int, keyed: bool, numbers_end: list[int]
          ) -> tuple[Kind | None, bool]:
    """The computation the question's own words (what is left once the table's names are
    masked) ask for, and whether the largest is wanted; None for none (a cell is asked). A
    row named by its key asks for a cell even in counting words
    (「MT-158は福岡に何個ありますか」)."""
    if named_rows >= 2 and _WHICH.search(masked):
        return "comparison", _direction(masked[_WHICH.search(masked).start():]) is not False
    extreme = _EXTREME.search(masked)
    if extreme:
        # 「いちばん稼働率が低い」: the direction is said a few words after the marker.
        said = extreme["most"] or masked[extreme.start():extreme.end() + _DIRECTION_REACH]
        return "extreme", _direction(said) is not False
    count = _COUNT.search(masked)
    # 「定員は何人ですか」 asks a column's value: the counter follows a column of numbers.
    value_asked = count and any(masked[end:count.start()] in ("は", "が", "も")
                                for end in numbers_end)
    if count and not keyed and not value_asked:
        return "count", True
    return None, True


def _direction(words: str) -> bool | None:
    """True for larger (高い, 最大), False for smaller (安い, 最小), None when unsaid."""
    positions = [(words.find(w), True) for w in (*_MORE, "最大", "最高", "最多", "最長", "最重")]
    positions += [(words.find(w), False) for w in (*_LESS, "最小", "最低", "最少", "最短", "最軽",
                                                    "最安")]
    said = [(at, larger) for at, larger in positions if at >= 0]
    return min(said)[1] if said else None


def _conditions(q: str, table: StoredTable, named: list[tuple[int, Mention | None]],
                values: list[tuple[int, int, Mention]]) -> list[Condition]:
    """The conditions of a count or an extreme: a cell text the question writes (equal to it,
    or listed in it) and a number bound to the column named just before it."""
    conditions: list[Condition] = []
    spans = sorted((m.start, c) for c, m in named if m is not None)
    for bound in _BOUND.finditer(q):
        before = [c for start, c in spans if start < bound.start()]
        if not before:
            continue
        column = before[-1]
        if not numeric_column(table, column):
            continue
        op = _OPS.get(bound["op"] or "")
        if op is None and bound["op"]:
            op = ">" if bound["op"].removeprefix("より").startswith(_MORE) else "<"
        number = Decimal(bound["number"].replace(",", ""))
        conditions.append(Condition(column=column, op=op or "=", text=bound[0], number=number))
    # A cell text the question writes, where no number already bounds that column.
    seen = {(c.column, "") for c in conditions}
    for r, c, mention in values:
        text = q[mention.start:mention.end]
        if (c, "") in seen or (c, text) in seen or cell_number(text) is not None:
            continue
        seen.add((c, text))
        op = "=" if normalized(table.rows[r].cells[c]) == text else "has"
        conditions.append(Condition(column=c, op=op, text=text))
    return conditions
