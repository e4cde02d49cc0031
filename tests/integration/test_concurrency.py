"""Ingests that overlap each other and the readers: two `kb ingest` processes over the same
changed documents at once, and readers searching while a writer replaces a document again and
again. No duplicates, no errors, and every reader sees either the old or the new version of a
document, never a mix."""

from __future__ import annotations

import hashlib
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import msgspec
import numpy as np
import psycopg
import pytest

from bench.crash import (
    Corpus,
    IndexChecker,
    kb_env,
    run_ingest,
    scratch_database,
    start_ingest,
)
from kb_core.database import connect
from kb_core.embeddings import make_embedder
from kb_core.settings import EmbedderSettings
from kb_pipeline.in_process import ingest_paths
from kb_search.search import Searcher, configure_search_session
from kb_search.synonyms import Synonyms

GROUPS = ["all-employees"]
_VERSION = re.compile(r"（第(\d+)版）")  # every sentence of bench.crash.document_text says it


@pytest.fixture
def dagster_url(admin_url: str) -> Iterator[str]:
    """Dagster instance storage of this test's own, in PostgreSQL as `kb` keeps it."""
    with scratch_database(admin_url, "dagster") as url:
        yield url


class _Reader(threading.Thread):
    """Reads one document again and again on its own connection until stopped; records what
    it saw and every read that was no whole version of the document."""

    def __init__(self, url: str, uri: str) -> None:
        super().__init__(daemon=True)
        self.url, self.uri = url, uri
        self.seen: Counter[str] = Counter()
        self.violations: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with connect(self.url, autocommit=True) as conn:
            configure_search_session(conn)
            while not self.stop.wait(0.005):
                self.read(conn)

    def read(self, conn: psycopg.Connection) -> None:
        raise NotImplementedError


class ChunkReader(_Reader):
    """The document's row and all its chunks in one statement: exactly one version's chunks."""

    def __init__(self, url: str, uri: str, checker: IndexChecker) -> None:
        super().__init__(url, uri)
        self.checker = checker

    def read(self, conn: psycopg.Connection) -> None:
        row = conn.execute(
            "SELECT d.checksum, array_agg(c.text_sha256 ORDER BY c.chunk_index) "
            "FROM documents d LEFT JOIN chunks c ON c.document_id = d.id "
            "WHERE d.source_uri = %s GROUP BY d.id, d.checksum", (self.uri,)).fetchone()
        if row is None:
            self.violations.append("document missing")
            return
        checksum, chunks = row
        version = self.checker.corpus.versions.get(checksum, (None, "unknown"))[1]
        self.seen[f"v{version}"] += 1
        if chunks != self.checker.expected_chunks(checksum):
            self.violations.append(f"row of v{version} with {len(chunks)} other chunks")


class SearchReader(_Reader):
    """Hybrid searches for the document: its hits all come from one version (every sentence
    names its version) and hold each chunk once."""

    def __init__(self, url: str, uri: str, question: str) -> None:
        super().__init__(url, uri)
        self.searcher = Searcher(EmbedderSettings("hashing"), Synonyms(Path("/nonexistent")))
        self.prepared = self.searcher.prepare(question)

    def read(self, conn: psycopg.Connection) -> None:
        result, _ = self.searcher.search(conn, self.prepared, GROUPS, k=30)
        hits = [h for h in result.hits if h.source_uri == self.uri]
        versions = {v for h in hits for v in _VERSION.findall(h.content)}
        self.seen[",".join(sorted(versions)) or "none"] += 1
        if len(versions) > 1 or len({h.chunk_index for h in hits}) != len(hits):
            self.violations.append(f"hits {[(h.chunk_index, h.content[-8:]) for h in hits]}")


def _readers(url: str, corpus: Corpus, checker: IndexChecker, doc: int) -> list:
    uri = str(corpus.path(doc).resolve())
    return [ChunkReader(url, uri, checker),
            SearchReader(url, uri, f"{doc}号の規程は何を定めていますか")]


def _stop(readers: list) -> None:
    for reader in readers:
        reader.stop.set()
    for reader in readers:
        reader.join(timeout=30)


def _at_once(env: dict[str, str], path: Path, checker: IndexChecker, url: str) -> list[dict]:
    """`kb ingest PATH` twice at the same time; the JSON of each (both must succeed, and the
    first to finish must leave every file it reported on indexed at its current bytes)."""
    procs = [start_ingest(env, path) for _ in range(2)]
    while all(proc.poll() is None for proc in procs):
        time.sleep(0.02)
    with connect(url, autocommit=True) as conn:
        outdated_at_first_exit = checker.outdated(conn)
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    summaries = [msgspec.json.decode(out) for out in outputs]
    for summary in summaries:
        assert summary["failed"] == []
        assert summary["ingested"] + summary["skipped"] == summary["documents"], summary
    assert outdated_at_first_exit == []
    return summaries


def test_two_kb_ingests_of_the_same_changed_documents_at_once(
    admin_url, database_url, dagster_url, tmp_path
):
    # Each file also has a copy in another folder, so the two runs embed the same texts.
    corpus = Corpus.create(tmp_path / "corpus", 12, mirrored=True)
    checker = IndexChecker(corpus)
    env = kb_env(tmp_path / "kb_home", database_url, dagster_url)
    assert run_ingest(env, corpus.folder)["failed"] == []
    readers = _readers(database_url, corpus, checker, 0)
    for reader in readers:
        reader.start()
    try:
        for _ in range(2):
            corpus.advance(random.Random(), 1.0, 0, 0)
            _at_once(env, corpus.folder, checker, database_url)
            with connect(database_url, autocommit=True) as conn:
                assert checker.check(conn) == []
                assert checker.unfinished(conn) == []
    finally:
        _stop(readers)
    for reader in readers:
        assert reader.violations == []


def test_readers_see_the_old_or_the_new_version_while_a_document_is_replaced(
    settings, instance, database_url, tmp_path
):
    corpus = Corpus.create(tmp_path / "corpus", 5)
    checker = IndexChecker(corpus)
    ingest_paths([corpus.folder], None, settings, instance)
    readers = _readers(database_url, corpus, checker, 2)
    for reader in readers:
        reader.start()
    try:
        for version in (2, 1, 2):
            corpus.write(2, version)
            summary = ingest_paths([corpus.path(2)], None, settings,
                                   instance)
            assert (summary.ingested, summary.failed) == (1, [])
    finally:
        _stop(readers)
    chunk_reader, search_reader = readers
    assert chunk_reader.violations == [] and search_reader.violations == []
    # The readers did overlap the replacements: they saw both versions.
    assert {"v1", "v2"} <= set(chunk_reader.seen), chunk_reader.seen
    assert {"1", "2"} <= set(search_reader.seen), search_reader.seen



def test_an_ingest_embedding_texts_another_run_is_caching_reuses_them(
    settings, instance, database_url, tmp_path
):
    corpus = Corpus.create(tmp_path / "corpus", 2)
    checker = IndexChecker(corpus)
    ingest_paths([corpus.folder], None, settings, instance)
    corpus.write(1, 2)
    checksum = next(c for c, version in corpus.versions.items() if version == (1, 2))
    texts = checker.chunk_texts(checksum)
    embedder = make_embedder(EmbedderSettings("hashing"))
    with connect(database_url) as other:
        # Another run caching the same texts, its transaction still open: the ingest below
        # finds them missing from the cache, embeds them, and must wait for this one.
        with other.cursor().copy("COPY embedding_cache (model, text_sha256, embedding) "
                                 "FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["text", "text", "vector"])
            for text, vector in zip(texts, embedder.embed_documents(texts), strict=True):
                copy.write_row((embedder.name, hashlib.sha256(text.encode()).hexdigest(),
                                vector.astype(np.float32)))
        committer = threading.Thread(target=_commit_once_blocked, args=(other, database_url))
        committer.start()
        summary = ingest_paths([corpus.path(1)], None, settings, instance)
        committer.join()
    assert (summary.ingested, summary.failed) == (1, [])
    with connect(database_url, autocommit=True) as conn:
        assert checker.check(conn) == [] and checker.unfinished(conn) == []


def _commit_once_blocked(other: psycopg.Connection, url: str) -> None:
    """Commit `other` once a session of the database waits for a lock (on its rows)."""
    with connect(url, autocommit=True) as conn:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()[0]:
            time.sleep(0.05)
    other.commit()
