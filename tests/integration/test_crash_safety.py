"""`kb ingest` killed with SIGKILL in every stage of a large ingest: the index stays consistent
after each kill, and a run after the last one completes the work.

A short variant of bench/crash.py (which kills many more times and prints what it found):
real `kb ingest` processes, real Dagster runs, the session's PostgreSQL, the hashing embedder.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.crash import (
    STAGES,
    Corpus,
    IndexChecker,
    dagster_leftovers,
    kb_env,
    kill_round,
    run_ingest,
    scratch_database,
)
from kb_core.database import connect


@pytest.fixture
def kb_process(admin_url: str, database_url: str, tmp_path: Path) -> Iterator[tuple[dict, Path]]:
    """The environment of `kb` processes on this test's database, with a Dagster instance of
    their own (KB_HOME and instance storage); and that KB_HOME."""
    home = tmp_path / "kb_home"
    with scratch_database(admin_url, "dagster") as dagster_url:
        yield kb_env(home, database_url, dagster_url), home


def test_sigkill_in_every_stage_leaves_a_consistent_index_and_a_rerun_completes(
    kb_process, database_url, tmp_path
):
    env, home = kb_process
    rng = random.Random()
    corpus = Corpus.create(tmp_path / "corpus", 150)
    checker = IndexChecker(corpus)
    stages = rng.sample(STAGES, len(STAGES))
    rounds = []
    with connect(database_url, autocommit=True) as conn:
        for n, stage in enumerate(stages):
            changed = len(corpus.current) if n == 0 else corpus.advance(rng, 0.4, 3, 3)
            # The kill point: a random number of documents into the stage, within the first
            # run (up to 200 documents) or the second.
            rounds.append(kill_round(env, corpus, conn, changed,
                                     (stage, rng.randint(1, changed - 10)), checker))
        assert [r.violations for r in rounds] == [[]] * len(rounds), rounds

        summary = run_ingest(env, corpus.folder)
        assert summary["failed"] == [], summary
        assert checker.unfinished(conn) == []
        assert checker.check(conn) == []
    # Killed runs are marked failed (the sensor skips files of unfinished runs), and Dagster
    # holds one partition per file on disk.
    assert dagster_leftovers(home, corpus) == []
    # The kills did interrupt the ingests, most of them half-way through publishing or before.
    assert sum(r.killed for r in rounds) >= 4, rounds
