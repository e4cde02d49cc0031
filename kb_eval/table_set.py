"""Writes a table development set: company-like Excel workbooks and CSV files, and questions
whose answers are computed from their cells.

    .venv/bin/python -m kb_eval.table_set /tmp/tables --seed 7
    KB_HOME=/tmp/kbtab .venv/bin/kb ingest /tmp/tables/docs --groups public
    KB_HOME=/tmp/kbtab .venv/bin/kb eval /tmp/tables/eval.jsonl --groups public --answers

writes /tmp/tables/docs/ (eight workbooks, two CSV files) and /tmp/tables/eval.jsonl.

Why: a company's prices, stocks, allowances and specifications live in spreadsheets, and a
question about them is answered by one cell (P12345の単価), a whole column (the highest, how
many) or two rows side by side. Prose retrieval finds the workbook; the answer needs the table
read as a table. Each workbook is laid out in a shape that a table reader must cope with:

- a plain header in row 1 (保守部品価格表, 社用車リスト, LTシリーズ of 製品スペック一覧);
- title and preamble rows above the header, with a unit line 「単位：円」「（単位：円）」
  (研修コース一覧, 仕入先一覧, 出張手当表, 設備点検表, 拠点別在庫一覧);
- a two-row header with merged cells, 「日当」 and 「宿泊費」 each over 「A地域 / B地域 / C地域」
  (出張手当表);
- a table starting at column B or C, column A empty (拠点別在庫一覧, HVシリーズ);
- notes under the table (「注1」「注2」「※」) and 「合計」 rows, which are not data rows;
- number formats '#,##0', '0.0', '0%' and '"¥"#,##0': a question and its gold answer use the
  value as shown (39,800, 92%, ¥24,500), never the stored 0.92;
- matrices, read by row header × column header (出張手当表, 拠点別在庫一覧);
- two workbooks with two sheets (保守部品価格表, 製品スペック一覧);
- CSV files with a plain header, one UTF-8 with a BOM, one Shift_JIS (cp932).

Every question names its table's rows and columns in words a reader of that one table
understands, and its answer is computed here from the data written:

- "cell": one row (its key) and one column, or both headers of a matrix → the cell as shown;
- "extreme": the row with the highest or lowest value of a column → its key; only for a unique
  winner, except a few lines with "tie": true, "answer" the first tied key and "answers" all;
- "count": rows meeting a condition (=, 以上, 以下, 未満) or all rows → the count in digits;
- "comparison": which of two rows has the higher or lower value → its key (never equal);
- near misses ("answerable": false, "miss": "near"): a plausible key no table holds, or a
  column the named row's table lacks though another table has it (HV-5210の在庫数).

This is our development set: the table reader and the answerer may be tuned on it, and figures
on it are development figures. The team keeps held-out table sets of its own, which are not
generated here. The same seed gives byte-identical files (the workbooks' dates are fixed), so
the set is regenerated, not kept.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import math
import operator
import random
import shutil
import sys
import zipfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import msgspec
import openpyxl
from openpyxl.styles import Font
from openpyxl.worksheet.worksheet import Worksheet
from openpyxl.writer.excel import ExcelWriter

__all__ = [
    "QUOTAS",
    "Column",
    "DrawnQuestion",
    "Table",
    "TableQuestion",
    "TableSet",
    "build_tables",
    "draw_questions",
    "main",
    "render_documents",
    "shown",
    "table_set",
]

Value = int | float | str
T = TypeVar("T")

# Questions per kind; "tie" lines are extremes with several winners, "near" the near misses.
QUOTAS = {"cell": 60, "extreme": 25, "tie": 4, "count": 25, "comparison": 20, "near": 14}
YEN = '"¥"#,##0'
_STAMP = dt.datetime(2026, 10, 1, 9, 0, 0)
_BOLD = Font(bold=True)
TOTAL = "合計"


@dataclass(frozen=True)
class Column:
    """One column: its header as written, how a question names it, how its cells are shown."""

    header: str
    label: str = ""  # the name in a question when not the header: "単価" for "単価(円)"
    kind: str = "measure"  # "measure"; "category" (values repeat); "name" (one per row, text)
    number_format: str = "General"
    unit: str = ""  # after a figure in a question: "円", "kW"
    more: str = ""  # the adjective of the larger value ("高い"); empty: not compared
    less: str = ""
    asks: tuple[str, ...] = ()  # endings of a cell question fitting this column: "は何kWですか"
    group: str = ""  # the merged header above this one, in a two-row header
    forms: tuple[str, ...] = ()  # a matrix's cell questions, "{key}" the row header

    @property
    def name(self) -> str:
        return self.label or self.header


@dataclass(frozen=True)
class Table:
    """One table of one sheet (or CSV file): its rows, keyed by their first column, and layout."""

    source: str  # the file name
    sheet: str
    title: str  # how a question names the table
    nouns: tuple[str, ...]  # what a row is, as a question names the answer: ("部品", "品番")
    counter: str  # 「何{counter}」: 品目, 社, 台
    key: str  # the header of the key column
    columns: tuple[Column, ...]
    rows: tuple[tuple[str, tuple[Value, ...]], ...]
    preamble: tuple[str, ...] = ()  # lines above the header ("" leaves a row empty)
    notes: tuple[str, ...] = ()
    first_column: int = 1
    total: tuple[str, ...] = ()  # headers of the columns summed in a 合計 row under the data
    coded: bool = True  # keys are codes (P12345), not names
    absent: tuple[str, ...] = ()  # keys of this table's kind that no table holds
    encoding: str = ""  # of a CSV file; empty for a sheet of a workbook

    def values(self, column: Column) -> list[tuple[str, Value]]:
        """(key, value) of every data row in `column`, in table order."""
        at = self.columns.index(column)
        return [(key, cells[at]) for key, cells in self.rows]

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)


class TableQuestion(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line of eval.jsonl."""

    question: str
    expected_source: str | None = None
    answerable: bool = True
    miss: str | None = None
    answer: str | None = None
    answers: list[str] | None = None  # of a tie: every tied key
    table: str  # the kind: cell, extreme, count, comparison
    tie: bool = False
    note: str | None = None


@dataclass(frozen=True)
class DrawnQuestion:
    """A written line and what it asks, so its answer can be recomputed."""

    line: TableQuestion
    table: Table
    column: Column | None = None
    keys: tuple[str, ...] = ()  # the rows the question names
    op: str = ""  # max/min (extreme, comparison); =, >=, <=, < or "" for all rows (count)
    threshold: Value | None = None


@dataclass(frozen=True)
class TableSet:
    tables: list[Table]
    documents: dict[str, bytes]  # file name → bytes
    questions: list[DrawnQuestion]


def shown(value: Value, number_format: str) -> str:
    """`value` as a spreadsheet shows it under `number_format`."""
    if isinstance(value, str):
        return value
    if number_format == "#,##0":
        return f"{value:,}"
    if number_format == YEN:
        return f"¥{value:,}"
    if number_format == "0.0":
        return f"{value:.1f}"
    if number_format == "0%":
        return f"{round(value * 100)}%"
    return str(value)


def _amount(value: Value, column: Column) -> str:
    """`value` as a question writes a figure: 「39,800円」「7.5kW」「92%」."""
    if column.number_format == YEN and isinstance(value, int):
        return f"{value:,}円"
    return shown(value, column.number_format) + column.unit


# --- the tables ------------------------------------------------------------------------------

_PART_BASES = ("ベアリング", "Vベルト", "オイルシール", "Oリング", "ギアモータ", "電磁弁",
               "近接センサ", "リレー", "ヒューズ", "冷却ファン", "フィルタエレメント",
               "カップリング", "エアシリンダ", "タイミングベルト", "ブレーキパッド",
               "操作スイッチ", "表示灯", "電磁接触器", "圧力計", "流量センサ",
               "リミットスイッチ", "ボールねじ", "リニアガイド", "ノズル", "パッキン")
_SUPPLIERS = ("東洋精工", "北辰工業", "三栄産業", "大和機材", "日進化成", "富士見製作所",
              "中央ベアリング", "光和電子", "関東ゴム工業", "西日本メタル", "丸栄商事",
              "共立技研", "昭和バルブ", "新明工機", "朝日計器", "平和モーター")
_PREFECTURES = ("東京都", "神奈川県", "埼玉県", "愛知県", "大阪府", "兵庫県", "福岡県",
                "静岡県", "長野県", "新潟県")
_SUPPLIES = ("軍手", "ウエス", "切削油 20L", "結束バンド", "養生テープ", "保護メガネ",
             "防塵マスク", "耳栓", "乾電池 単3", "ニトリル手袋", "パーツクリーナー", "グリス",
             "潤滑スプレー", "研磨ディスク", "ドリル刃 6mm", "ビニールテープ", "絶縁手袋")
_CARS = {"ハイブリッドセダン": 5, "コンパクトカー": 5, "軽バン": 4, "ライトバン": 5,
         "ワンボックス": 8, "SUV": 7, "軽トラック": 2}
_BASES = ("本社", "大阪支店", "名古屋営業所", "福岡営業所", "仙台営業所")
_COURSES = ("新入社員基礎研修", "ビジネス文書作成講座", "品質管理入門", "安全衛生教育",
            "新任管理職研修", "プレゼンテーション実践", "財務諸表の読み方",
            "情報セキュリティ基礎", "リーダーシップ研修", "生産管理実務", "英語ミーティング講座",
            "データ分析入門", "コンプライアンス研修", "安全運転講習")
_AUDIENCES = ("新入社員", "全社員", "管理職", "技術職", "営業職")
_GRADES = ("役員", "部長", "次長", "課長", "係長", "主任", "一般社員")
_REGIONS = ("A地域", "B地域", "C地域")
_MACHINES = ("コンプレッサー", "射出成形機", "NC旋盤", "マシニングセンタ", "溶接ロボット",
             "搬送コンベア", "空調機", "乾燥炉", "プレス機")
_PLACES = ("第1工場", "第2工場", "倉庫棟", "研究棟")
_ROOMS = ("大会議室", "第1会議室", "第2会議室", "第3会議室", "応接室A", "応接室B", "役員会議室",
          "研修室1", "研修室2", "打合せスペース", "小会議室")
_ROOM_EQUIPMENT = ("モニター", "プロジェクター", "ホワイトボードのみ", "電子黒板")
_SOFTWARE = ("図面管理システム", "経費精算クラウド", "3次元CAD", "勤怠管理システム",
             "ウイルス対策ソフト", "Web会議サービス", "PDF編集ソフト", "在庫管理パッケージ",
             "電子契約サービス", "グループウェア", "帳票作成ツール", "翻訳支援ツール",
             "名刺管理サービス")
_DEPARTMENTS = ("情報システム部", "総務部", "設計部", "経理部")

_MONEY = ("はいくらですか", "は何円ですか")


def _codes(rng: random.Random, prefix: str, numbers: range, n: int) -> tuple[list[str], list[str]]:
    """`n` codes drawn from `numbers`, sorted, and three more of the series left unused."""
    drawn = [f"{prefix}{number}" for number in rng.sample(numbers, n + 3)]
    return sorted(drawn[:n]), drawn[n:]


def _names(rng: random.Random, pool: Sequence[str], n: int) -> tuple[list[str], list[str]]:
    """`n` names of `pool` in pool order, and the names left unused."""
    used = set(rng.sample(range(len(pool)), n))
    return ([name for i, name in enumerate(pool) if i in used],
            [name for i, name in enumerate(pool) if i not in used])


def _price(rng: random.Random, low: int, high: int, step: int) -> int:
    """A price drawn evenly on a log scale, a multiple of `step`."""
    return max(step, round(math.exp(rng.uniform(math.log(low), math.log(high))) / step) * step)


def _parts(rng: random.Random, suppliers: Sequence[str]) -> tuple[Table, Table]:
    keys, absent = _codes(rng, "P", range(10000, 20000), 48)
    rng.shuffle(keys)
    current, retired = sorted(keys[:40]), sorted(keys[40:])
    name = {key: f"{rng.choice(_PART_BASES)} {rng.choice('ABCDEFGHJK')}{rng.randint(10, 99)}"
            for key in keys}
    price = Table(
        "保守部品価格表.xlsx", "価格表", "保守部品価格表", ("部品", "品番"), "品目", "品番",
        (Column("品名", kind="name"),
         Column("単価(円)", "単価", number_format="#,##0", unit="円", more="高い", less="安い",
                asks=_MONEY),
         Column("在庫数", number_format="#,##0", unit="個", more="多い", less="少ない",
                asks=("は何個ですか", "はいくつですか")),
         Column("仕入先", kind="category", asks=("はどこですか",))),
        tuple((k, (name[k], _price(rng, 300, 150000, 10),
                   0 if rng.random() < 0.08 else rng.randint(1, 1200), rng.choice(suppliers)))
              for k in current),
        notes=("※ 単価は税抜価格です。", "※ 在庫数は毎月末に更新します。"), absent=tuple(absent))
    discontinued = Table(
        "保守部品価格表.xlsx", "廃番部品", "廃番部品一覧", ("廃番部品",), "品目", "品番",
        (Column("品名", kind="name"),
         Column("廃番年", kind="category", unit="年", more="遅い", less="早い",
                asks=("は何年ですか", "はいつですか")),
         Column("代替品番", kind="name")),
        tuple((k, (name[k], rng.randint(2015, 2025), rng.choice(current))) for k in retired),
        preamble=("廃番部品一覧",))
    return price, discontinued


def _suppliers(rng: random.Random) -> Table:
    names, absent = _names(rng, _SUPPLIERS, 12)
    return Table(
        "仕入先一覧.xlsx", "仕入先", "仕入先一覧", ("仕入先", "会社"), "社", "会社名",
        (Column("所在地(都道府県)", "所在地", kind="category", asks=("はどこですか",)),
         Column("取引開始年", kind="category", unit="年", more="遅い", less="早い",
                asks=("は何年ですか", "はいつですか")),
         Column("年間取引額(百万円)", "年間取引額", number_format="0.0", unit="百万円",
                more="多い", less="少ない", asks=("はいくらですか",)),
         Column("評価ランク", kind="category", asks=("は何ですか",))),
        tuple((n, (rng.choice(_PREFECTURES), rng.randint(1985, 2023),
                   rng.randint(30, 4500) / 10, rng.choice("AABBBC"))) for n in names),
        preamble=("仕入先一覧", "2026年4月1日現在　調達部", ""),
        notes=("注1　評価ランクは品質・納期・価格の総合評価（A・B・C）です。",
               "注2　年間取引額は2025年度の実績です。"),
        coded=False, absent=tuple(absent))


def _stock(rng: random.Random) -> Table:
    keys, absent = _codes(rng, "MT-", range(101, 200), 14)
    names = rng.sample(_SUPPLIES, len(keys))
    sites = ("東京", "大阪", "名古屋", "福岡")
    columns = tuple(Column(site, f"{site}の在庫数", number_format="#,##0", unit="個",
                           more="多い", less="少ない",
                           forms=(f"{{key}}の{site}の在庫数は？",
                                  f"{site}拠点にある{{key}}の在庫は何個ですか",
                                  f"{{key}}は{site}に何個ありますか"))
                    for site in sites)
    return Table(
        "拠点別在庫一覧.xlsx", "在庫", "拠点別在庫一覧", ("品目", "品目コード"), "品目",
        "品目コード",
        (Column("品目名", kind="name"), *columns),
        tuple((k, (n, *(0 if rng.random() < 0.1 else rng.randint(5, 900) for _ in sites)))
              for k, n in zip(keys, names, strict=True)),
        preamble=("拠点別在庫一覧（2026年9月末時点）", "単位：個", ""), first_column=2,
        total=sites, notes=("※ 拠点間で移動中の在庫は含みません。",), absent=tuple(absent))


def _hv_series(rng: random.Random) -> Table:
    keys, absent = _codes(rng, "HV-", range(5100, 6000, 10), 15)
    return Table(
        "製品スペック一覧.xlsx", "HVシリーズ", "HVシリーズ仕様一覧", ("HVシリーズの機種",), "機種",
        "型式",
        (Column("最大出力 (kW)", "最大出力", number_format="0.0", unit="kW", more="大きい",
                less="小さい", asks=("は何kWですか",)),
         Column("定格電圧 (V)", "定格電圧", kind="category", unit="V", asks=("は何Vですか",)),
         Column("質量 (kg)", "質量", number_format="0.0", unit="kg", more="重い", less="軽い",
                asks=("は何kgですか",)),
         Column("効率", number_format="0%", more="高い", less="低い", asks=("は何%ですか",))),
        tuple((k, (rng.randint(15, 750) / 10, rng.choice((200, 400)), rng.randint(80, 4800) / 10,
                   rng.randint(84, 97) / 100)) for k in keys),
        preamble=("HVシリーズ　主要諸元",), first_column=3, absent=tuple(absent))


def _lt_series(rng: random.Random) -> Table:
    keys, absent = _codes(rng, "LT-", range(3000, 3600, 20), 10)
    return Table(
        "製品スペック一覧.xlsx", "LTシリーズ", "LTシリーズ仕様一覧", ("LTシリーズの機種",), "機種",
        "型式",
        (Column("最大出力 (kW)", "最大出力", number_format="0.0", unit="kW", more="大きい",
                less="小さい", asks=("は何kWですか",)),
         Column("最大回転数 (rpm)", "最大回転数", number_format="#,##0", unit="rpm",
                more="高い", less="低い", asks=("は何rpmですか",)),
         Column("質量 (kg)", "質量", number_format="0.0", unit="kg", more="重い", less="軽い",
                asks=("は何kgですか",)),
         Column("冷却方式", kind="category", asks=("は何ですか",))),
        tuple((k, (rng.randint(4, 220) / 10, rng.randrange(1200, 6001, 50),
                   rng.randint(25, 900) / 10, rng.choice(("空冷", "水冷")))) for k in keys),
        absent=tuple(absent))


def _cars(rng: random.Random) -> Table:
    keys, absent = _codes(rng, "CAR-", range(101, 160), 12)
    types = [rng.choice(list(_CARS)) for _ in keys]
    return Table(
        "社用車リスト.xlsx", "社用車", "社用車リスト", ("社用車", "車両"), "台", "管理番号",
        (Column("車種", kind="category", asks=("は何ですか",)),
         Column("配置拠点", kind="category", asks=("はどこですか",)),
         Column("年式", kind="category", unit="年", more="新しい", less="古い",
                asks=("は何年ですか",)),
         Column("走行距離 (km)", "走行距離", number_format="#,##0", unit="km", more="長い",
                less="短い", asks=("は何kmですか",)),
         Column("乗車定員", kind="category", unit="人", more="多い", less="少ない",
                asks=("は何人ですか",))),
        tuple((k, (t, rng.choice(_BASES), rng.randint(2016, 2025), rng.randint(2000, 180000),
                   _CARS[t])) for k, t in zip(keys, types, strict=True)),
        notes=("※ 走行距離は2026年9月末時点の値です。",), absent=tuple(absent))


def _courses(rng: random.Random) -> Table:
    names, absent = _names(rng, _COURSES, 11)
    days = [rng.choice((1, 1, 2, 2, 3, 5)) for _ in names]
    return Table(
        "研修コース一覧.xlsx", "研修", "研修コース一覧", ("研修コース", "コース"), "コース",
        "コース名",
        (Column("日数", kind="category", unit="日", more="長い", less="短い",
                asks=("は何日ですか", "は何日間ですか")),
         Column("定員", unit="人", more="多い", less="少ない", asks=("は何人ですか",)),
         Column("受講料", number_format=YEN, more="高い", less="安い", asks=_MONEY),
         Column("対象", kind="category", asks=("は誰ですか",))),
        tuple((n, (d, rng.randrange(10, 41, 5), d * rng.randrange(6000, 30001, 500),
                   rng.choice(_AUDIENCES))) for n, d in zip(names, days, strict=True)),
        preamble=("2026年度　社内研修コース一覧", "（単位：円）"),
        notes=("注1　受講料は各部門の研修予算から支出します。",
               "注2　定員に達した時点で申込みを締め切ります。"),
        coded=False, absent=tuple(absent))


def _allowance_column(group: str, region: str) -> Column:
    forms = (f"{{key}}が{region}に出張したときの{group}は？",
             f"{{key}}の{region}での{group}はいくらですか",
             f"{region}へ出張する{{key}}の{group}を教えてください")
    return Column(region, f"{region}の{group}", number_format="#,##0", unit="円", more="高い",
                  less="低い", group=group, forms=forms)


def _allowances(rng: random.Random) -> Table:
    rows = []
    for rank, grade in enumerate(_GRADES):
        # Steps of at least 300 (daily) and 500 (lodging) between grades keep every column
        # strictly ordered after the regions' reductions, so its extremes are unique.
        daily = 5200 - 500 * rank + rng.randrange(-100, 101, 100)
        lodging = 16000 - 1500 * rank + rng.randrange(-500, 501, 500)
        rows.append((grade, tuple(int(round(base * factor, -2)) for base in (daily, lodging)
                                  for factor in (1.0, 0.9, 0.8))))
    return Table(
        "出張手当表.xlsx", "国内出張", "国内出張手当表", ("役職",), "区分", "役職",
        tuple(_allowance_column(group, region) for group in ("日当", "宿泊費")
              for region in _REGIONS),
        tuple(rows), preamble=("国内出張手当　等級・地域別", "単位：円"),
        notes=("注1　日当・宿泊費は1日（1泊）あたりの額です。",
               "注2　地域の区分は出張旅費規程 第5条によります。"),
        coded=False)


def _equipment(rng: random.Random) -> Table:
    keys, absent = _codes(rng, "EQ-", range(301, 400), 16)
    numbered: Counter[str] = Counter()
    names = []
    for _ in keys:
        machine = rng.choice(_MACHINES)
        numbered[machine] += 1
        names.append(f"{machine}{numbered[machine]}号機")
    return Table(
        "設備点検表.xlsx", "点検", "設備点検表", ("設備", "設備番号"), "台", "設備番号",
        (Column("設備名", kind="name"),
         Column("設置場所", kind="category", asks=("はどこですか",)),
         Column("点検周期 (月)", "点検周期", kind="category", unit="か月", more="長い",
                less="短い", asks=("は何か月ですか",)),
         Column("稼働率", number_format="0%", more="高い", less="低い", asks=("は何%ですか",)),
         Column("不具合件数", unit="件", more="多い", less="少ない", asks=("は何件ですか",))),
        tuple((k, (n, rng.choice(_PLACES), rng.choice((1, 3, 6, 12)), rng.randint(60, 99) / 100,
                   rng.choice((0, 0, 1, 1, 2, 3, 4, 6, 9)))) for k, n in zip(keys, names,
                                                                          strict=True)),
        preamble=("設備点検表（2026年度上期）",), total=("不具合件数",),
        notes=("※ 稼働率は計画稼働時間に対する実稼働時間の割合です。",), absent=tuple(absent))


def _rooms(rng: random.Random) -> Table:
    names, absent = _names(rng, _ROOMS, 9)
    return Table(
        "会議室一覧.csv", "", "会議室一覧", ("会議室",), "室", "会議室名",
        (Column("所在階", kind="category", unit="階", asks=("は何階ですか",)),
         Column("定員", unit="人", more="多い", less="少ない", asks=("は何人ですか",)),
         Column("設備", kind="category", asks=("は何ですか",)),
         Column("予約上限(時間)", "予約上限", kind="category", unit="時間", more="長い",
                less="短い", asks=("は何時間ですか",))),
        tuple((n, (rng.randint(2, 9), rng.choice((4, 6, 8, 10, 12, 16, 20, 40)),
                   rng.choice(_ROOM_EQUIPMENT), rng.choice((2, 3, 4, 8)))) for n in names),
        coded=False, absent=tuple(absent), encoding="utf-8-sig")


def _licences(rng: random.Random) -> Table:
    names, absent = _names(rng, _SOFTWARE, 10)
    return Table(
        "ソフトウェアライセンス一覧.csv", "", "ソフトウェアライセンス一覧", ("ソフトウェア",), "件",
        "ソフトウェア名",
        (Column("契約数", unit="ライセンス", more="多い", less="少ない",
                asks=("はいくつですか",)),
         Column("年額(千円)", "年額", unit="千円", more="高い", less="安い", asks=_MONEY),
         Column("更新月", kind="category", unit="月", asks=("は何月ですか",)),
         Column("担当部署", kind="category", asks=("はどこですか",))),
        tuple((n, (rng.randint(3, 300), rng.randint(40, 3000), rng.randint(1, 12),
                   rng.choice(_DEPARTMENTS))) for n in names),
        coded=False, absent=tuple(absent), encoding="cp932")


def build_tables(rng: random.Random) -> list[Table]:
    """The set's tables, their data drawn with `rng`, in the order of their files."""
    suppliers = _suppliers(rng)
    tables = [*_parts(rng, [name for name, _ in suppliers.rows[:6]]), suppliers, _stock(rng),
              _hv_series(rng), _lt_series(rng), _cars(rng), _courses(rng), _allowances(rng),
              _equipment(rng), _rooms(rng), _licences(rng)]
    keys = Counter(key for table in tables for key, _ in table.rows)
    # A key in two tables would make 「{key}の…」 ask about either.
    if repeated := [key for key, n in keys.items() if n > 1]:
        raise ValueError(f"keys in more than one table: {repeated}")
    return tables


# --- the files -------------------------------------------------------------------------------

def render_documents(tables: list[Table]) -> dict[str, bytes]:
    """File name → bytes: a workbook per source with a sheet per table, or a CSV file."""
    by_source: dict[str, list[Table]] = {}
    for table in tables:
        by_source.setdefault(table.source, []).append(table)
    return {source: _csv_bytes(sheets[0]) if sheets[0].encoding else _workbook_bytes(sheets)
            for source, sheets in by_source.items()}


def _csv_bytes(table: Table) -> bytes:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\r\n")
    writer.writerow([table.key, *(c.header for c in table.columns)])
    for key, cells in table.rows:
        writer.writerow([key, *(shown(v, c.number_format)
                                for v, c in zip(cells, table.columns, strict=True))])
    return text.getvalue().encode(table.encoding)


def _workbook_bytes(tables: list[Table]) -> bytes:
    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for table in tables:
        _write_sheet(workbook.create_sheet(table.sheet), table)
    workbook.properties.title = Path(tables[0].source).stem
    workbook.properties.creator = workbook.properties.lastModifiedBy = "kb_eval.table_set"
    workbook.properties.created = workbook.properties.modified = _STAMP
    raw = io.BytesIO()
    # Workbook.save stamps `modified` with the clock; its writer alone keeps ours.
    ExcelWriter(workbook, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED)).save()
    return _restamped(raw.getvalue())


def _restamped(archive: bytes) -> bytes:
    """`archive` with every ZIP entry dated _STAMP: zipfile dates entries by the clock."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(archive)) as source, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for entry in source.infolist():
            fixed = zipfile.ZipInfo(entry.filename, date_time=_STAMP.timetuple()[:6])
            fixed.compress_type = zipfile.ZIP_DEFLATED
            fixed.external_attr = entry.external_attr
            target.writestr(fixed, source.read(entry.filename))
    return out.getvalue()


def _write_sheet(sheet: Worksheet, table: Table) -> None:
    left = table.first_column
    row = 1
    for line in table.preamble:
        if line:
            sheet.cell(row, left, line)
        row += 1
    row = _write_header(sheet, table, row)
    for key, cells in table.rows:
        _write_row(sheet, row, left, key, cells, table.columns)
        row += 1
    if table.total:
        sums = tuple(sum(v for _, v in table.values(c)) if c.header in table.total else None
                     for c in table.columns)
        _write_row(sheet, row, left, TOTAL, sums, table.columns)
        row += 1
    for offset, note in enumerate(table.notes, start=1):
        sheet.cell(row + offset, left, note)


def _write_header(sheet: Worksheet, table: Table, row: int) -> int:
    """Writes the header at `row`; returns the first row under it."""
    headers = [table.key, *(c.header for c in table.columns)]
    groups = ["", *(c.group for c in table.columns)]
    two_rows = any(groups)
    for i, (header, group) in enumerate(zip(headers, groups, strict=True)):
        column = table.first_column + i
        if not group:
            sheet.cell(row, column, header).font = _BOLD
            if two_rows:
                sheet.merge_cells(start_row=row, start_column=column, end_row=row + 1,
                                  end_column=column)
            continue
        sheet.cell(row + 1, column, header).font = _BOLD
        if groups[i - 1] != group:
            width = next((j for j in range(i, len(groups)) if groups[j] != group),
                         len(groups)) - i
            sheet.cell(row, column, group).font = _BOLD
            sheet.merge_cells(start_row=row, start_column=column, end_row=row,
                              end_column=column + width - 1)
    return row + (2 if two_rows else 1)


def _write_row(sheet: Worksheet, row: int, left: int, key: str,
               cells: Sequence[Value | None], columns: Sequence[Column]) -> None:
    sheet.cell(row, left, key)
    for i, (value, column) in enumerate(zip(cells, columns, strict=True), start=1):
        if value is None:
            continue
        cell = sheet.cell(row, left + i, value)
        if not isinstance(value, str):
            cell.number_format = column.number_format


# --- the questions ---------------------------------------------------------------------------

_ENDINGS = ("は？", "を教えてください", "はどうなっていますか")
_EXTREME = ("{label}がいちばん{adj}{noun}は？", "{label}が最も{adj}{noun}はどれですか",
            "{label}の最も{adj}{noun}を教えてください", "いちばん{label}が{adj}{noun}はどれ？")
_COUNT = ("{cond}{noun}は何{counter}ありますか", "{cond}{noun}はいくつありますか",
          "{cond}{noun}は何{counter}？", "{cond}{noun}の数を教えてください")
_COUNT_ALL = ("登録されている{noun}は何{counter}ですか",
              "{title}に載っている{noun}はいくつありますか", "{noun}は全部で何{counter}ありますか")
_COMPARE = ("{a}と{b}では{label}はどちらが{adj}ですか", "{label}が{adj}のは{a}と{b}のどちらですか",
            "{a}と{b}を比べると、{label}が{adj}のはどちら？",
            "{a}と{b}、{label}がより{adj}のはどっちですか")
_OPS: dict[str, Callable[[Value, Value], bool]] = {
    "=": operator.eq, ">=": operator.ge, "<=": operator.le, "<": operator.lt}
_OP_WORDS = {"=": "", ">=": "以上", "<=": "以下", "<": "未満"}
# Of the counts, how many count all rows (「登録されている社用車は何台ですか」); the rest compare.
_COUNTS_OF_ALL_ROWS = 3
# Columns a row's table lacks though another table has them: near misses by column.
_MISSING_COLUMNS = (("HVシリーズ仕様一覧", "在庫数"), ("HVシリーズ仕様一覧", "単価"),
                    ("LTシリーズ仕様一覧", "効率"), ("廃番部品一覧", "単価"),
                    ("社用車リスト", "稼働率"), ("研修コース一覧", "担当部署"),
                    ("拠点別在庫一覧", "単価"), ("仕入先一覧", "担当部署"), ("設備点検表", "年式"))


def draw_questions(tables: list[Table], rng: random.Random) -> list[DrawnQuestion]:
    """The set's questions about `tables`, drawn with `rng`: QUOTAS of each kind, in turn."""
    return [*_spread(rng, [_cell_questions(rng, t) for t in tables], QUOTAS["cell"]),
            *_spread(rng, [_extremes(rng, t, ties=False) for t in tables], QUOTAS["extreme"]),
            *_spread(rng, [_extremes(rng, t, ties=True) for t in tables], QUOTAS["tie"]),
            *_spread(rng, [[_count_all(rng, t)] for t in tables], _COUNTS_OF_ALL_ROWS),
            *_spread(rng, [_counts(rng, t) for t in tables],
                     QUOTAS["count"] - _COUNTS_OF_ALL_ROWS),
            *_spread(rng, [_comparisons(rng, t) for t in tables], QUOTAS["comparison"]),
            *_near_misses(rng, tables)]


def _spread(rng: random.Random, pools: list[list[T]], n: int) -> list[T]:
    """Up to `n` items taken in turn from the shuffled `pools`, so every table is asked about."""
    queues = [rng.sample(pool, len(pool)) for pool in pools if pool]
    rng.shuffle(queues)
    taken: list[T] = []
    while len(taken) < n and any(queues):
        for queue in queues:
            if queue and len(taken) < n:
                taken.append(queue.pop())
    return taken


def _cell_questions(rng: random.Random, table: Table) -> list[DrawnQuestion]:
    drawn = []
    for key, cells in table.rows:
        for column, value in zip(table.columns, cells, strict=True):
            line = TableQuestion(question=_cell_text(rng, table, key, column),
                                 expected_source=table.source,
                                 answer=shown(value, column.number_format), table="cell")
            drawn.append(DrawnQuestion(line, table, column, (key,)))
    return drawn


def _cell_text(rng: random.Random, table: Table, key: str, column: Column) -> str:
    if column.forms:
        return rng.choice(column.forms).format(key=key)
    named = f"{table.key}{key}の" if table.coded else f"{table.nouns[0]}「{key}」の"
    subjects = [f"{key}の", named]
    ending = rng.choice(column.asks if column.asks and rng.random() < 0.5 else _ENDINGS)
    return f"{rng.choice(subjects)}{column.name}{ending}"


def _winners(table: Table, column: Column, op: str) -> list[str]:
    """The keys of the rows holding the highest (op "max") or lowest value, in table order."""
    values = table.values(column)
    best = (max if op == "max" else min)(v for _, v in values)
    return [key for key, v in values if v == best]


def _orderable(table: Table) -> list[Column]:
    return [c for c in table.columns if c.more]


def _extremes(rng: random.Random, table: Table, ties: bool) -> list[DrawnQuestion]:
    drawn = []
    for column in _orderable(table):
        for op, adj in (("max", column.more), ("min", column.less)):
            winners = _winners(table, column, op)
            # A tie of many rows is a question about the data's spread, not a table reading.
            if (2 <= len(winners) <= 4) if ties else len(winners) == 1:
                text = rng.choice(_EXTREME).format(label=column.name, adj=adj,
                                                   noun=rng.choice(table.nouns))
                line = TableQuestion(question=text, expected_source=table.source,
                                     answer=winners[0], answers=winners if ties else None,
                                     table="extreme", tie=ties)
                drawn.append(DrawnQuestion(line, table, column, op=op))
    return drawn


def _count_all(rng: random.Random, table: Table) -> DrawnQuestion:
    text = rng.choice(_COUNT_ALL).format(noun=table.nouns[0], counter=table.counter,
                                         title=table.title)
    return _count_line(table, text, None, "", None)


def _counts(rng: random.Random, table: Table) -> list[DrawnQuestion]:
    noun = table.nouns[0]
    drawn = []
    # Two conditions on a measure (以上, 以下, 未満), one on a category (=); a dict, not a set,
    # drops a repeat in the order drawn (a set's order changes with the process's hash seed).
    conditions = dict.fromkeys(condition for column in table.columns
                               for _ in range(2 if column.kind == "measure" else 1)
                               if (condition := _condition(rng, table, column)) is not None)
    for column, op, threshold in conditions:
        cond = f"{column.name}が{_amount(threshold, column)}{_OP_WORDS[op]}の"
        text = rng.choice(_COUNT).format(cond=cond, noun=noun, counter=table.counter)
        drawn.append(_count_line(table, text, column, op, threshold))
    return drawn


def _condition(rng: random.Random, table: Table,
               column: Column) -> tuple[Column, str, Value] | None:
    """A condition on `column` met by some rows but not all, or None."""
    values = [v for _, v in table.values(column)]
    if column.kind == "category":
        return column, "=", rng.choice(values)
    if column.kind != "measure":
        return None
    for _ in range(10):
        op, threshold = rng.choice((">=", "<=", "<")), _threshold(rng, column, values)
        if 0 < sum(_OPS[op](v, threshold) for v in values) < len(values):
            return column, op, threshold
    return None


def _threshold(rng: random.Random, column: Column, values: list[Value]) -> Value:
    """A value of the column, or half the time a round figure under it (39,800 → 39,000)."""
    value = rng.choice(values)
    if rng.random() < 0.5:
        return value
    if isinstance(value, int):
        step = 10 ** max(len(str(value)) - 2, 0)
        return value // step * step
    if column.number_format == "0%" and isinstance(value, float):
        return round(value * 100) // 5 * 5 / 100
    return value


def _count_line(table: Table, text: str, column: Column | None, op: str,
                threshold: Value | None) -> DrawnQuestion:
    if column is None:
        count = len(table.rows)
    else:
        count = sum(_OPS[op](v, threshold) for _, v in table.values(column))
    line = TableQuestion(question=text, expected_source=table.source, answer=str(count),
                         table="count")
    return DrawnQuestion(line, table, column, op=op, threshold=threshold)


def _comparisons(rng: random.Random, table: Table) -> list[DrawnQuestion]:
    drawn = []
    for column in _orderable(table):
        values = table.values(column)
        pairs: set[frozenset[str]] = set()
        for _ in range(4):
            (a, va), (b, vb) = rng.sample(values, 2)
            if va == vb or frozenset((a, b)) in pairs:
                continue
            pairs.add(frozenset((a, b)))
            op, adj = rng.choice((("max", column.more), ("min", column.less)))
            text = rng.choice(_COMPARE).format(a=a, b=b, label=column.name, adj=adj)
            winner = a if (va > vb) == (op == "max") else b
            line = TableQuestion(question=text, expected_source=table.source, answer=winner,
                                 table="comparison")
            drawn.append(DrawnQuestion(line, table, column, (a, b), op=op))
    return drawn


def _near_misses(rng: random.Random, tables: list[Table]) -> list[DrawnQuestion]:
    half = QUOTAS["near"] // 2
    written = _document_text(tables)
    pools = [[(table, key) for key in table.absent if key not in written] for table in tables]
    by_key = _spread(rng, pools, QUOTAS["near"] - half)
    by_column = rng.sample(_MISSING_COLUMNS, half)
    return ([_absent_key(rng, table, key) for table, key in by_key]
            + [_absent_column(rng, tables, title, label) for title, label in by_column])


def _document_text(tables: list[Table]) -> str:
    """Every text the files hold, joined: an absent key must occur in none of it."""
    parts = [text for t in tables for text in (t.title, t.key, *t.preamble, *t.notes)]
    for table in tables:
        parts += [c.header for c in table.columns] + [c.group for c in table.columns]
        parts += [key for key, _ in table.rows]
        parts += [shown(v, c.number_format) for _, cells in table.rows
                  for v, c in zip(cells, table.columns, strict=True)]
    return "\n".join(parts)


def _absent_key(rng: random.Random, table: Table, key: str) -> DrawnQuestion:
    column = rng.choice(table.columns)
    line = TableQuestion(question=_cell_text(rng, table, key, column), answerable=False,
                         miss="near", table="cell",
                         note=f"{key} is in no table; {table.title} lists others like it")
    return DrawnQuestion(line, table, column, (key,))


def _absent_column(rng: random.Random, tables: list[Table], title: str,
                   label: str) -> DrawnQuestion:
    table = next(t for t in tables if t.title == title)
    other = next(t for t in tables if t.column(label) is not None)
    column = other.column(label)
    if table.column(label) is not None or column is None:
        raise ValueError(f"{title} has a column {label}, or no table has one")
    key, _ = rng.choice(table.rows)
    line = TableQuestion(question=_cell_text(rng, table, key, column), answerable=False,
                         miss="near", table="cell",
                         note=f"{title} has no {label} column; {other.title} has one")
    return DrawnQuestion(line, table, column, (key,))


# --- the set ---------------------------------------------------------------------------------

def table_set(seed: int) -> TableSet:
    """The tables, their files and their questions, all drawn with `seed`."""
    rng = random.Random(seed)
    tables = build_tables(rng)
    questions = draw_questions(tables, rng)
    texts = Counter(q.line.question for q in questions)
    if repeated := [text for text, n in texts.items() if n > 1]:
        raise ValueError(f"questions drawn twice: {repeated}")
    return TableSet(tables, render_documents(tables), questions)


def _write(drawn: TableSet, out: Path) -> None:
    docs = out / "docs"
    shutil.rmtree(docs, ignore_errors=True)
    docs.mkdir(parents=True)
    for name, data in drawn.documents.items():
        (docs / name).write_bytes(data)
    with open(out / "eval.jsonl", "w", encoding="utf-8", newline="\n") as lines:
        for question in drawn.questions:
            lines.write(json.dumps(msgspec.to_builtins(question.line), ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Write the set; 0 on success."""
    parser = argparse.ArgumentParser(prog="python -m kb_eval.table_set",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path,
                        help="the folder to write (its docs/ and eval.jsonl are replaced)")
    parser.add_argument("--seed", type=int, default=7, help="the seed of the data and questions")
    args = parser.parse_args(argv)
    drawn = table_set(args.seed)
    _write(drawn, args.out)
    kinds = Counter("near miss" if q.line.miss else "tie" if q.line.tie else q.line.table
                    for q in drawn.questions)
    print(f"{args.out}: {len(drawn.documents)} files, {len(drawn.tables)} tables, "
          + ", ".join(f"{n} {kind}" for kind, n in kinds.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
