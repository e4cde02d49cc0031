"""Writes a set of conversations drawn from a question set with gold spans (JaQuAD) and its
articles.

    .venv/bin/python -m kb_eval.conversation_set ../shared/devsets/jaquad/eval.jsonl \\
        ../shared/devsets/jaquad/docs --conversations 300 --seed 61 \\
        --out /tmp/jaquad_conversations.jsonl

Why: a follow-up names its topic by それ/その or not at all (「その人はいつ生まれたの？」 after a
question about アレクサンダー・グラハム・ベル), and the team's conversation set
(samples/eval_conversations.jsonl) is small and written by us; this one is made from questions
nobody on the team wrote. Ask it like its source, with `--groups public`.

Each conversation is two questions about one article that both name it (its title, or the part
of the title a question writes: ベル of アレクサンダー・グラハム・ベル). The first is asked as
written; the second is asked as a follow-up, in one of three kinds assigned in equal shares at
random:

- "pronoun": the name and its particle become それは／それが／それを／その (「ベルの母は誰か」 →
  「その母は誰か」);
- "dropped": the name and its particle are dropped (「ベルの母は誰か」 → 「母は誰か」);
- "topic_change": the second question is about another article and asked as written.

The last turn keeps its source question as `standalone`, its document and gold span. The same
input and seed give a byte-identical file, so the set is regenerated, not kept.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

from kb_eval.question_sets import EvalQuestion, load_questions

__all__ = ["KINDS", "conversation_set", "follow_up", "main", "named"]

KINDS = ("pronoun", "dropped", "topic_change")
_PARTICLES = {"の": "その", "は": "それは", "が": "それが", "を": "それを", "に": "それに"}
_TITLE_PARTS = re.compile(r"[・（）()\s]+")
_SHORTEST_NAME = 2


def named(question: str, title: str) -> str | None:
    """The longest part of `title` the question writes as a word of its own followed by a
    particle (the whole title, or a part of it between ・ and brackets), or None."""
    parts = [title, *(_TITLE_PARTS.split(title))]
    for part in sorted({p for p in parts if len(p) >= _SHORTEST_NAME}, key=len, reverse=True):
        if _mention(part).search(question):
            return part
    return None


def _mention(name: str) -> re.Pattern[str]:
    """`name` written whole (not the tail of a longer name: スペンサー・コンプトン is no
    mention of コンプトン) and followed by a particle."""
    return re.compile(f"(?<![・=A-Za-z0-9\u30a0-\u30ff\u4e00-\u9fff]){re.escape(name)}"
                      f"(?P<particle>[{''.join(_PARTICLES)}])")


def follow_up(question: str, name: str, kind: str) -> str:
    """`question` with its first mention of `name` (and the particle after it) pointed back to
    by a pronoun, or dropped."""
    match = _mention(name).search(question)
    if match is None:
        raise ValueError(f"{question!r} does not write {name!r} before a particle")
    said = _PARTICLES[match["particle"]] if kind == "pronoun" else ""
    return question[:match.start()] + said + question[match.end():]


def conversation_set(questions: list[EvalQuestion], docs: Path, conversations: int,
                     seed: int) -> list[dict]:
    """`conversations` conversations from the answerable `questions` whose article (in
    `docs`, its first line `# title`) the question names; ValueError when too few exist."""
    titles = {path.name: path.read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
              for path in sorted(docs.glob("*.md"))}
    naming: dict[str, list[tuple[EvalQuestion, str]]] = {}
    for q in questions:
        if (q.answerable and q.expected_source in titles and q.answer
                and (name := named(q.question, titles[q.expected_source]))):
            naming.setdefault(q.expected_source, []).append((q, name))
    articles = sorted(a for a, named_by in naming.items() if len(named_by) >= 2)
    if len(articles) < 2:
        raise ValueError("fewer than two articles have two questions that name them")
    rng = random.Random(seed)
    kinds = [KINDS[i % len(KINDS)] for i in range(conversations)]
    rng.shuffle(kinds)
    written, seen = [], set()
    attempts = 0
    while len(written) < conversations:
        attempts += 1
        if attempts > 100 * conversations:
            raise ValueError(f"only {len(written)} distinct conversations could be drawn")
        kind = kinds[len(written)]
        article = rng.choice(articles)
        (first, _), (second, name) = rng.sample(naming[article], 2)
        if kind == "topic_change":
            other = rng.choice([a for a in articles if a != article])
            second, _ = rng.choice(naming[other])
        key = (first.question, second.question)
        if key in seen:
            continue
        seen.add(key)
        asked = (second.question if kind == "topic_change"
                 else follow_up(second.question, name, kind))
        written.append({
            "turns": [{"question": first.question},
                      {"question": asked, "standalone": second.question,
                       "expected_source": second.expected_source, "answer": second.answer}],
            "kind": kind})
    return written


def main(argv: list[str]) -> int:
    """Write the set; 0 on success, 2 when the input cannot give it."""
    parser = argparse.ArgumentParser(prog="python -m kb_eval.conversation_set",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("eval", type=Path, help="a JSONL question set with expected sources")
    parser.add_argument("docs", type=Path, help="its articles, each starting `# title`")
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--seed", type=int, default=61, help="the seed of the draw")
    parser.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    args = parser.parse_args(argv)
    try:
        lines = conversation_set(load_questions(args.eval), args.docs, args.conversations,
                                 args.seed)
    except ValueError as err:
        print(f"conversation_set: {err}", file=sys.stderr)
        return 2
    with open(args.out, "w", encoding="utf-8", newline="\n") as out:
        for line in lines:
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"{len(lines)} conversations written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
