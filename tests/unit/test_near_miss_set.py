"""The near-miss set's generator (kb_eval.near_miss_set): a near miss is a question whose gold span
left the corpus with a removed paragraph; a control keeps its span in its own article; the far
misses are carried over; the same seed writes byte-identical files."""

from __future__ import annotations

import json
from pathlib import Path

from kb_eval.near_miss_set import main
from kb_eval.question_sets import load_questions, squeezed

ARTICLE = """# 作曲家

作曲家は1860年に生まれた。
父は宿屋を営んでいた。

祖母は織物を生業としていた。

作曲家は交響曲を9曲書いた。
最初の交響曲は1888年に完成した。
"""


def small_set(root: Path) -> Path:
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "j001.md").write_text(ARTICLE, encoding="utf-8")
    (root / "docs" / "j002.md").write_text("# 別の記事\n\n宿屋の話。\n", encoding="utf-8")
    lines = [
        {"question": "作曲家はいつ生まれたか?", "expected_source": "j001.md", "answer": "1860年"},
        {"question": "父は何を営んでいたか?", "expected_source": "j001.md", "answer": "宿屋"},
        {"question": "祖母は何を生業としていたか?", "expected_source": "j001.md",
         "answer": "織物"},
        {"question": "交響曲を何曲書いたか?", "expected_source": "j001.md", "answer": "9曲"},
        {"question": "最初の交響曲はいつ完成したか?", "expected_source": "j001.md",
         "answer": "1888年"},
        {"question": "載っていない記事の問は何か?", "answerable": False},
    ]
    (root / "eval.jsonl").write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return root


def generate(source: Path, out: Path, seed: int = 67) -> Path:
    assert main([str(source), "--out", str(out), "--per-article", "2", "--seed", str(seed)]) == 0
    return out


def test_near_misses_lost_their_span_and_controls_kept_theirs(tmp_path: Path) -> None:
    out = generate(small_set(tmp_path / "src"), tmp_path / "near")
    docs = {p.name: squeezed(p.read_text(encoding="utf-8")) for p in (out / "docs").iterdir()}
    article = docs["j001.md"]
    assert article.startswith("#作曲家")  # the title line stays
    assert article.count("\n\n") < ARTICLE.count("\n\n")  # two paragraphs went
    questions = load_questions(out / "eval.jsonl")
    near = [q for q in questions if q.miss == "near"]
    controls = [q for q in questions if q.answerable]
    assert near and controls
    for q in near:
        assert not q.answerable and q.expected_source is None
        assert not any(squeezed(q.answer or "") in text for text in docs.values())
    for q in controls:
        assert squeezed(q.answer or "") in docs[q.expected_source or ""]
    # 宿屋 is also written in the other article: removed from its own, it is no near miss.
    assert "父は何を営んでいたか?" not in {q.question for q in near}
    assert [q.question for q in questions if q.miss == "far"] == ["載っていない記事の問は何か?"]


def test_the_same_seed_writes_byte_identical_files(tmp_path: Path) -> None:
    source = small_set(tmp_path / "src")
    first = generate(source, tmp_path / "a")
    second = generate(source, tmp_path / "b")
    for name in ("eval.jsonl", "docs/j001.md", "docs/j002.md"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
