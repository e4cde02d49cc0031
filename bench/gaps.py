"""The knowledge-gap report timed over a query log holding N unanswered questions.

    .venv/bin/python bench/gaps.py --home /tmp/kbdev2 --questions 500 2000 [--repeat 3]

For each N, N distinct questions no document answers (made from the labelled gap topics'
questions, each with a different suffix, so every one is embedded) are logged in the
installation of --home as one bench caller's, the report is read through the engine's face as
`kb gaps` reads it, and they are deleted again with the question vectors the report kept.
Prints the seconds of the first reading (every question embedded), the median of the later
ones (the vectors kept), and the topics found.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import statistics
import time
import uuid
from pathlib import Path

from kb_core.database import connect
from kb_core.migrations import prepare_database
from kb_core.settings import REPO_ROOT, Settings
from kb_search import open_knowledge_base

SUBJECT = "bench-gaps"
ASPECTS = ["", "について", "を教えて", "はどこで確認できますか", "の担当は誰ですか", "の手順は",
           "の期限は", "の最新版は", "の例外は", "の費用は"]


def _questions(n: int) -> list[str]:
    lines = (REPO_ROOT / "samples" / "gap_topics.jsonl").read_text(encoding="utf-8").splitlines()
    base = [json.loads(line)["question"].rstrip("？?") for line in lines if line.strip()]
    return [f"{base[i % len(base)]}{ASPECTS[i // len(base) % len(ASPECTS)]}（{i}）"
            for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--questions", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    settings = prepare_database(dataclasses.replace(Settings.from_env(), home=args.home))
    with open_knowledge_base(settings, connections=1, answers=False) as kb:
        for n in args.questions:
            with connect(settings.database_url, autocommit=True) as conn:
                for question in _questions(n):
                    conn.execute(
                        "INSERT INTO query_log (id, caller_kind, caller_subject, groups, "
                        "question, answer, found, verified, answerer, hits, latency_ms) VALUES "
                        "(%s, 'cli', %s, '{all-employees}', %s, '', false, true, 'extractive', "
                        "'[]', 1)", (uuid.uuid4(), SUBJECT, question))
            began = dt.datetime.now(dt.UTC)
            try:
                seconds, topics = [], 0
                for _ in range(1 + args.repeat):
                    started = time.perf_counter()
                    topics = len(kb.gaps.report(None, 1).topics)
                    seconds.append(time.perf_counter() - started)
            finally:
                with connect(settings.database_url, autocommit=True) as conn:
                    conn.execute("DELETE FROM query_log WHERE caller_subject = %s", (SUBJECT,))
                    conn.execute("DELETE FROM question_vectors WHERE used_at >= %s", (began,))
            later = seconds[1:]
            print(f"{n} questions: first reading {seconds[0]:.2f} s; later readings median "
                  f"{statistics.median(later):.2f} s ({', '.join(f'{s:.2f}' for s in later)}); "
                  f"{topics} topics")


if __name__ == "__main__":
    main()
