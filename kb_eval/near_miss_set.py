"""Writes a near-miss development set from a question set with gold spans over a folder of
articles (JaQuAD): the articles with the paragraphs that answer some questions removed, and those
questions, which the corpus now talks about but no longer answers.

    .venv/bin/python -m kb_eval.near_miss_set ../shared/devsets/jaquad --out /tmp/jaquad_near
    KB_HOME=/tmp/kbjqn .venv/bin/kb ingest /tmp/jaquad_near/docs --groups public
    KB_HOME=/tmp/kbjqn .venv/bin/kb eval /tmp/jaquad_near/eval.jsonl --groups public --answers

Why: a question about a topic the index does not hold at all is easy to refuse; the common case
in a company is a question about a topic the documents discuss, whose answer they do not hold
(ZP-2041's manual is indexed, its price is written nowhere). Such a question finds the right
article, shares its words, and is answered with a sentence that does not answer it.

An article is Markdown: its `# title`, then paragraphs separated by blank lines. In each article,
`--per-article` paragraphs that hold a question's gold span are drawn with `--seed` and removed.
A question becomes a near miss (`"answerable": false, "miss": "near"`) when its gold span was in a
removed paragraph and now occurs nowhere in the corpus (NFKC, white space removed), unless the
question itself names it (a choice between two). The other
answerable questions about the same articles are the controls, kept when their gold span occurs
in no removed paragraph and still in their article (so none of them lost its answer). The source
set's unanswerable questions are kept, as far misses (`"miss": "far"`): they ask about articles
not in the folder. Questions that fit none of these (a span removed here but written elsewhere)
are left out. The same input and seed give byte-identical files, so the set is regenerated, not
kept.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
from collections import Counter
from pathlib import Path

import msgspec

from kb_eval.question_sets import EvalQuestion, load_questions, squeezed

__all__ = ["main", "near_miss_set"]


def _paragraphs(text: str) -> list[str]:
    return [p.strip("\n") for p in text.split("\n\n") if p.strip()]


def near_miss_set(articles: dict[str, str], questions: list[EvalQuestion], per_article: int,
                  seed: int) -> tuple[dict[str, str], list[EvalQuestion]]:
    """The articles (file name → Markdown) with paragraphs removed, and the questions of the set:
    near misses, controls and far misses, in the order of `questions`."""
    rng = random.Random(seed)
    by_article: dict[str, list[EvalQuestion]] = {}
    for q in questions:
        if q.answerable and q.answer and q.expected_source in articles:
            by_article.setdefault(q.expected_source, []).append(q)
    kept: dict[str, str] = {}
    removed: dict[str, list[str]] = {}  # article → its removed paragraphs, squeezed
    for name in sorted(articles):
        paragraphs = _paragraphs(articles[name])
        spans = [squeezed(q.answer or "") for q in by_article.get(name, [])]
        # The title line is never removed: it names what the article is about.
        answering = [i for i, p in enumerate(paragraphs)
                     if not p.startswith("# ") and any(s in squeezed(p) for s in spans)]
        gone = set(rng.sample(answering, min(per_article, len(answering))))
        removed[name] = [squeezed(paragraphs[i]) for i in sorted(gone)]
        kept[name] = "\n\n".join(p for i, p in enumerate(paragraphs) if i not in gone) + "\n"
    corpus = [squeezed(text) for text in kept.values()]
    chosen = []
    for q in questions:
        if not q.answerable:
            chosen.append(msgspec.structs.replace(q, miss="far"))
            continue
        if q.expected_source not in kept or not q.answer:
            continue
        span = squeezed(q.answer)
        in_removed = any(span in p for p in removed[q.expected_source])
        # A question naming its answer (「大正改訳」と明治元訳のどちら…) is answered by any
        # sentence comparing the two: no near miss, though its span left.
        if in_removed and span not in squeezed(q.question) \
                and not any(span in text for text in corpus):
            chosen.append(EvalQuestion(q.question, answerable=False, miss="near",
                                       answer=q.answer, question_type=q.question_type,
                                       note=f"its answer was removed from {q.expected_source}"))
        elif not in_removed and span in squeezed(kept[q.expected_source]):
            chosen.append(q)
    return kept, chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kb_eval.near_miss_set",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path,
                        help="a development set folder: docs/ (Markdown articles), eval.jsonl")
    parser.add_argument("--out", type=Path, required=True,
                        help="the folder to write (its docs/ and eval.jsonl are replaced)")
    parser.add_argument("--per-article", type=int, default=2,
                        help="answering paragraphs removed from each article (default 2)")
    parser.add_argument("--seed", type=int, default=67)
    args = parser.parse_args(argv)
    articles = {p.name: p.read_text(encoding="utf-8")
                for p in sorted((args.source / "docs").glob("*.md"))}
    questions = load_questions(args.source / "eval.jsonl")
    kept, chosen = near_miss_set(articles, questions, args.per_article, args.seed)
    docs = args.out / "docs"
    shutil.rmtree(docs, ignore_errors=True)
    docs.mkdir(parents=True)
    for name, text in kept.items():
        (docs / name).write_text(text, encoding="utf-8")
    encoder = msgspec.json.Encoder()
    with open(args.out / "eval.jsonl", "wb") as out:
        for q in chosen:
            out.write(encoder.encode(q) + b"\n")
    kinds = Counter(q.miss or "control" for q in chosen)
    print(f"{args.out}: {len(kept)} articles, {kinds['near']} near misses, "
          f"{kinds['control']} controls, {kinds['far']} far misses "
          f"({len(questions) - len(chosen)} questions of {args.source} left out)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
