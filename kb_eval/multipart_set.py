"""Writes a set of two-part questions drawn from a question set with gold spans (JaQuAD).

    .venv/bin/python -m kb_eval.multipart_set ../shared/devsets/jaquad/eval.jsonl \\
        --pairs 500 --seed 43 --out /tmp/jaquad_multipart.jsonl

Why: Deep mode splits a question with several parts into sub-questions and retrieves and
answers each on its own. The hard case is two parts about two different articles, where one
search for the whole question finds one article and misses the other. The team's own multi-part
set (samples/eval_multipart.jsonl) is small and written by us; this one is large and made from
questions nobody on the team wrote. Ask it like its source, with `--groups public`: its lines
carry no groups.

Each line pairs two answerable questions about different articles, drawn uniformly at random
(no pair twice), and joins them in one of four forms, in equal shares assigned at random:

- "また": 「Q1？また、Q2？」
- "と": 「Q1と、Q2？」, Q1 without its final mark, read as a noun clause (not always grammatical:
  the join is mechanical, and a splitter must cope with what people type)
- "comma": 「Q1、Q2？」, one question mark
- "none": 「Q1Q2？」, two clauses with no connector

Each part keeps its source question, document and gold span. The same input and seed give a
byte-identical file, so the set is regenerated, not kept.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

import msgspec

from kb_eval.question_sets import EvalPart, EvalQuestion, load_questions

__all__ = ["FORMS", "PairedQuestion", "join_questions", "main", "multipart_set"]

FORMS = ("また", "と", "comma", "none")
# JaQuAD ends most questions with "?", some with "。" (「誰ですか。」): both end the sentence.
_FINAL_MARKS = "?？。"


class PairedQuestion(msgspec.Struct):
    """One line of the written set: the joined question, its two parts and how they were joined."""

    question: str
    parts: list[EvalPart]
    form: str


def multipart_set(questions: list[EvalQuestion], pairs: int, seed: int) -> list[PairedQuestion]:
    """`pairs` two-part questions from the answerable `questions`, drawn with `seed`.

    Raises ValueError when fewer than `pairs` distinct pairs about different documents exist.
    """
    pool = [q for q in questions if q.answerable and q.expected_source and not q.parts]
    rng = random.Random(seed)
    drawn = _draw_pairs(pool, pairs, rng)
    forms = [FORMS[i % len(FORMS)] for i in range(pairs)]
    rng.shuffle(forms)
    return [PairedQuestion(join_questions(first.question, second.question, form),
                           [_part(first), _part(second)], form)
            for (first, second), form in zip(drawn, forms, strict=True)]


def join_questions(first: str, second: str, form: str) -> str:
    """`first` and `second` asked as one question, joined in `form` (one of FORMS)."""
    first, second = first.strip(), second.strip()
    bare = first.rstrip(_FINAL_MARKS)
    if form == "また":
        # Q1 keeps its own mark; a question typed without one is given "？".
        return f"{first if bare != first else first + '？'}また、{second}"
    if form == "と":
        return f"{bare}と、{second}"
    if form == "comma":
        return f"{bare}、{second}"
    if form == "none":
        return f"{bare}{second}"
    raise ValueError(f"unknown form {form!r}; the forms are {', '.join(FORMS)}")


def _draw_pairs(pool: list[EvalQuestion], pairs: int,
                rng: random.Random) -> list[tuple[EvalQuestion, EvalQuestion]]:
    per_document = Counter(q.expected_source for q in pool)
    possible = len(pool) * (len(pool) - 1) // 2 - sum(n * (n - 1) // 2
                                                      for n in per_document.values())
    if pairs > possible:
        raise ValueError(f"{pairs} pairs asked, but only {possible} pairs of answerable "
                         "questions about different documents exist")
    seen: set[frozenset[int]] = set()
    drawn: list[tuple[EvalQuestion, EvalQuestion]] = []
    # Rejection keeps the draw uniform over ordered pairs about different documents.
    while len(drawn) < pairs:
        i, j = rng.sample(range(len(pool)), 2)
        key = frozenset((i, j))
        if pool[i].expected_source == pool[j].expected_source or key in seen:
            continue
        seen.add(key)
        drawn.append((pool[i], pool[j]))
    return drawn


def _part(question: EvalQuestion) -> EvalPart:
    return EvalPart(question.question, question.expected_source, question.answer)


def main(argv: list[str]) -> int:
    """Write the set; 0 on success, 2 when the input cannot give it."""
    parser = argparse.ArgumentParser(prog="python -m kb_eval.multipart_set",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("eval", type=Path, help="a JSONL question set with expected sources")
    parser.add_argument("--pairs", type=int, default=500, help="how many questions to write")
    parser.add_argument("--seed", type=int, default=43, help="the seed of the draw")
    parser.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    args = parser.parse_args(argv)
    try:
        lines = multipart_set(load_questions(args.eval), args.pairs, args.seed)
    except ValueError as err:
        print(f"multipart_set: {err}", file=sys.stderr)
        return 2
    with open(args.out, "w", encoding="utf-8", newline="\n") as out:
        for line in lines:
            out.write(json.dumps(msgspec.to_builtins(line), ensure_ascii=False) + "\n")
    print(f"{len(lines)} questions written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
