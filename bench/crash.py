"""Crash safety: `kb ingest` killed with SIGKILL at random points of a large ingest, again and
again; after each kill the index must be consistent, and a last run must complete the work.

    .venv/bin/python bench/crash.py --docs 300 --kills 30

Runs against its own embedded PostgreSQL and Dagster instance (a temporary KB_HOME), with the
`hashing` embedder. Before each kill the corpus moves on: part of the documents get a new
version, a few are deleted and a few are added. A kill lands either when the ingest has reached a
random point of a random stage (so every stage is hit, however fast the machine) or after a
random delay. After each kill it checks, against the bytes of every version it wrote:

- the integrity queries of the asset checks (sql/queries/checks.sql): chunks 0..n-1 exactly
  once per document, unit-length vectors, no document of a forgotten file;
- no chunk without its document;
- each document's chunks are exactly those of the version its checksum names (no
  half-replaced document), and that checksum is one of a version written for its file;
- the keyword statistics equal what the chunks hold.

The test suite runs a short variant (tests/integration/test_crash_safety.py); the functions
here serve both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

KB = str(Path(sys.executable).parent / "kb")
# How far an ingest has come, counted over the rows this round touched.
STAGES = ("staged", "parsed", "chunked", "embedded", "indexed")

_TOPICS = ["出張", "経費", "休暇", "安全衛生", "情報管理", "品質", "購買", "研修", "設備"]
_SENTENCES = [
    "{t}の申請は{n}営業日前までに所属長へ提出する（第{v}版）。",
    "{t}の費用は1件あたり{m}円を上限とする（第{v}版）。",
    "{t}の記録は{n}年間保存する（第{v}版）。",
    "ZP-{c}型の{t}点検は稼働{m}時間ごとに実施する（第{v}版）。",
    "社員は{t}の教育を年{n}回以上受講する（第{v}版）。",
]


def document_text(doc: int, version: int) -> str:
    """Version `version` of document `doc`: every sentence names its version, and the number of
    articles changes between versions, so a mix of two versions cannot pass for either."""
    rng = random.Random(f"{doc}:{version}")
    lines = [f"# {_TOPICS[doc % len(_TOPICS)]}規程 第{doc}号", ""]
    for article in range(1, rng.randint(3, 8)):
        lines += [f"## 第{article}条（{rng.choice(_TOPICS)}）", ""]
        lines += [rng.choice(_SENTENCES).format(
            t=rng.choice(_TOPICS), n=rng.randint(1, 30), m=rng.randint(1, 500) * 100,
            c=rng.randint(1000, 9999), v=version) for _ in range(rng.randint(2, 6))]
        lines.append("")
    return "\n".join(lines)


@dataclass
class Corpus:
    """A watched folder whose documents move through versions; remembers every version."""

    folder: Path
    mirrored: bool = False  # every file also has a copy in copy/: the same texts in two files
    current: dict[int, int] = field(default_factory=dict)  # document -> version on disk
    versions: dict[str, tuple[int, int]] = field(default_factory=dict)  # checksum -> (doc, v)
    next_doc: int = 0

    @classmethod
    def create(cls, folder: Path, docs: int, mirrored: bool = False) -> Corpus:
        (folder / "copy").mkdir(parents=True)
        (folder / "_access.toml").write_text('groups = ["all-employees"]\n', encoding="utf-8")
        corpus = cls(folder, mirrored)
        for _ in range(docs):
            corpus.add()
        return corpus

    def path(self, doc: int) -> Path:
        return self.folder / f"doc{doc:05}.md"

    def paths(self, doc: int) -> list[Path]:
        """The file of `doc`, and its copy when mirrored."""
        main = self.path(doc)
        return [main, main.parent / "copy" / main.name] if self.mirrored else [main]

    def write(self, doc: int, version: int) -> None:
        data = document_text(doc, version).encode()
        self.versions[hashlib.sha256(data).hexdigest()] = (doc, version)
        for path in self.paths(doc):
            path.write_bytes(data)
        self.current[doc] = version

    def add(self) -> None:
        self.write(self.next_doc, 1)
        self.next_doc += 1

    def advance(self, rng: random.Random, share: float, deletes: int, adds: int) -> int:
        """Give a share of the documents a new version, delete and add a few; return how many
        files changed."""
        docs = sorted(self.current)
        edited = rng.sample(docs, int(len(docs) * share))
        for doc in edited:
            self.write(doc, self.current[doc] + 1)
        for doc in rng.sample(sorted(set(docs) - set(edited)), deletes):
            for path in self.paths(doc):
                path.unlink()
            del self.current[doc]
        for _ in range(adds):
            self.add()
        return len(edited) + deletes + adds

    def checksums(self) -> dict[str, str]:
        """source_uri -> checksum of every file on disk now."""
        return {
            str(path.resolve()): checksum
            for checksum, (doc, version) in self.versions.items()
            if self.current.get(doc) == version
            for path in self.paths(doc)
        }


def kb_env(home: Path, database_url: str | None = None,
           dagster_database_url: str | None = None) -> dict[str, str]:
    """Environment of a `kb` process: its own KB_HOME, the hashing embedder, and the given
    databases (else the embedded server under KB_HOME)."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "DAGSTER_"))}
    databases = {"KB_DATABASE_URL": database_url, "KB_DAGSTER_DATABASE_URL": dagster_database_url}
    return {**inherited, "KB_HOME": str(home), "KB_EMBEDDER": "hashing",
            **{name: url for name, url in databases.items() if url}}


def start_ingest(env: dict[str, str], folder: Path) -> subprocess.Popen[str]:
    # Its own process group: the kill takes whatever the command started, and nothing else.
    return subprocess.Popen([KB, "ingest", str(folder), "--json"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def run_ingest(env: dict[str, str], folder: Path, timeout: float = 600) -> dict:
    """`kb ingest FOLDER --json` to the end; its JSON."""
    proc = start_ingest(env, folder)
    out, _ = proc.communicate(timeout=timeout)
    return json.loads(out)


def progress(conn: psycopg.Connection, since: object) -> dict[str, int]:
    """Documents that reached each stage since `since` (a database timestamp)."""
    staged, parsed, chunked, embedded = conn.execute(
        "SELECT count(*), count(parsed), count(chunks), count(*) FILTER (WHERE embedded) "
        "FROM staged_documents WHERE staged_at >= %s", (since,)).fetchone()
    indexed = conn.execute("SELECT count(*) FROM documents WHERE ingested_at >= %s",
                           (since,)).fetchone()[0]
    # A document that went on keeps counting for the stages it passed.
    return {"staged": staged + indexed, "parsed": parsed + indexed, "chunked": chunked + indexed,
            "embedded": embedded + indexed, "indexed": indexed}


@dataclass
class KillRound:
    changed: int
    target: str  # "indexed>=40", "after 3.2 s"
    killed: bool  # False: the ingest finished before the kill point
    seconds: float
    reached: dict[str, int]
    violations: list[str]


def kill_round(env: dict[str, str], corpus: Corpus, conn: psycopg.Connection, changed: int,
               target: tuple[str, int] | float, checker: IndexChecker) -> KillRound:
    """Start `kb ingest`, SIGKILL it at `target` (a stage and a count of documents, or seconds),
    then check the index."""
    since = conn.execute("SELECT now()").fetchone()[0]
    started = time.monotonic()
    proc = start_ingest(env, corpus.folder)
    reached = progress(conn, since)
    while proc.poll() is None:
        if isinstance(target, float):
            due = time.monotonic() - started >= target
        else:
            reached = progress(conn, since)
            due = reached[target[0]] >= target[1]
        if due:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    killed = proc.wait() == -signal.SIGKILL
    seconds = time.monotonic() - started
    label = f"after {target:.1f} s" if isinstance(target, float) else f"{target[0]}>={target[1]}"
    return KillRound(changed, label, killed, seconds, progress(conn, since), checker.check(conn))


def random_target(rng: random.Random, changed: int, max_seconds: float) -> tuple[str, int] | float:
    """A kill point: half the time a random stage at a random count, else a random delay."""
    if rng.random() < 0.5:
        return rng.uniform(0.5, max_seconds)
    return rng.choice(STAGES), rng.randint(1, max(1, changed))


class IndexChecker:
    """The consistency of an index of `corpus`, whatever point an ingest stopped at."""

    def __init__(self, corpus: Corpus) -> None:
        from kb_core.embeddings import make_embedder
        from kb_core.settings import EmbedderSettings

        self.corpus = corpus
        self.embedder = make_embedder(EmbedderSettings(name="hashing"))
        self._expected: dict[str, list[str]] = {}

    def chunk_texts(self, checksum: str) -> list[str]:
        """The chunk texts of the version with `checksum`, in order, as the pipeline's own
        parser and chunker cut them."""
        from kb_pipeline.parsing import parse_document
        from kb_pipeline.stages import document_chunks

        doc, version = self.corpus.versions[checksum]
        parsed = parse_document(self.corpus.path(doc).name, document_text(doc, version).encode())
        return [c.text for c in document_chunks(parsed, self.embedder)]

    def expected_chunks(self, checksum: str) -> list[str]:
        """SHA-256 of each chunk text of the version with `checksum`, in order."""
        if checksum not in self._expected:
            self._expected[checksum] = [hashlib.sha256(text.encode()).hexdigest()
                                        for text in self.chunk_texts(checksum)]
        return self._expected[checksum]

    def check(self, conn: psycopg.Connection) -> list[str]:
        """Every violation found, as text; empty when the index is consistent."""
        from kb_core.queries import query

        found = [f"{name}: {row}" for name in
                 ("documents_with_broken_chunks", "chunks_with_bad_embeddings", "orphan_documents",
                  "keyword_statistics_drift")
                 for row in conn.execute(query(name), {"uris": None})]
        orphans = conn.execute("SELECT count(*) FROM chunks c WHERE NOT EXISTS "
                               "(SELECT 1 FROM documents d WHERE d.id = c.document_id)").fetchone()
        if orphans[0]:
            found.append(f"{orphans[0]} chunks without a document")
        rows = conn.execute(
            "SELECT d.path, d.checksum, array_agg(c.text_sha256 ORDER BY c.chunk_index) "
            "FROM documents d JOIN chunks c ON c.document_id = d.id "
            "GROUP BY d.id, d.path, d.checksum")
        for path, checksum, chunks in rows:
            if checksum not in self.corpus.versions:
                found.append(f"{path}: checksum {checksum[:12]} is no version ever written")
            elif chunks != self.expected_chunks(checksum):
                found.append(f"{path}: its {len(chunks)} chunks are not those of version "
                             f"{self.corpus.versions[checksum][1]}")
        drift = conn.execute(query("keyword_df_drift")).fetchone()[0]
        if drift:
            found.append(f"{drift} keyword statistics differ from the chunks")
        return found

    def outdated(self, conn: psycopg.Connection) -> list[str]:
        """Files not indexed at their current checksum, and documents of deleted files."""
        indexed = dict(conn.execute("SELECT source_uri, checksum FROM documents"))
        expected = self.corpus.checksums()
        left = [f"{uri}: indexed {indexed.get(uri, 'not')}, on disk {checksum[:12]}"
                for uri, checksum in expected.items() if indexed.get(uri) != checksum]
        return left + [f"{uri}: indexed but deleted" for uri in indexed.keys() - expected.keys()]

    def unfinished(self, conn: psycopg.Connection) -> list[str]:
        """What a completed ingest should have left done: every file indexed at its current
        checksum, no other document, nothing staged, no open failure."""
        left = self.outdated(conn)
        staged = conn.execute("SELECT count(*) FROM staged_documents").fetchone()[0]
        if staged:
            left.append(f"{staged} staged documents left behind")
        failures = conn.execute("SELECT count(*) FROM ingestion_failures "
                                "WHERE resolved_at IS NULL").fetchone()[0]
        if failures:
            left.append(f"{failures} open ingestion failures")
        return left


@contextmanager
def scratch_database(admin_url: str, prefix: str) -> Iterator[str]:
    """A new empty database on the server of `admin_url`, dropped afterwards; its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # a generated name, not input
    try:
        yield admin_url.replace("/postgres?", f"/{name}?")
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def dagster_leftovers(home: Path, corpus: Corpus) -> list[str]:
    """Runs of `kb ingest` still marked unfinished, and partitions that are not files on disk."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        unfinished = instance.get_runs(dg.RunsFilter(
            job_name="ingest_documents",
            statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING,
                      dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.QUEUED]))
        keys = set(instance.get_dynamic_partitions("documents"))
    left = [f"run {run.run_id} still {run.status.value}" for run in unfinished]
    on_disk = set(corpus.checksums())
    left += [f"partition of a deleted file: {key}" for key in sorted(keys - on_disk)]
    left += [f"no partition for {uri}" for uri in sorted(on_disk - keys)]
    return left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--share", type=float, default=0.4,
                        help="share of the documents that get a new version before each kill")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    rng = random.Random(seed)

    from kb_core.database import connect
    from kb_core.database_server import database_url, stop_embedded
    from kb_core.migrations import migrate
    from kb_core.settings import Settings

    home = Path("/tmp") / f"kbcrash-{uuid.uuid4().hex[:8]}"  # short: the socket lives in it
    env = kb_env(home)
    settings = Settings.from_env(env)
    url = database_url(settings)
    migrate(url)
    print(f"seed {seed}; {args.docs} documents, {args.kills} kills; KB_HOME {home}", flush=True)
    try:
        with tempfile.TemporaryDirectory() as tmp, connect(url, autocommit=True) as conn:
            corpus = Corpus.create(Path(tmp) / "docs", args.docs)
            checker = IndexChecker(corpus)
            started = time.monotonic()
            full = run_ingest(env, corpus.folder)
            full_s = time.monotonic() - started
            print(f"uninterrupted first ingest: {full_s:.1f} s, {full['chunks']} chunks",
                  flush=True)
            rounds = []
            for n in range(1, args.kills + 1):
                changed = corpus.advance(rng, args.share, deletes=3, adds=3)
                target = random_target(rng, changed, full_s * (args.share + 0.2))
                r = kill_round(env, corpus, conn, changed, target, checker)
                rounds.append(r)
                print(f"kill {n:3}: {r.changed} files changed, kill at {r.target:<16} "
                      f"{'killed' if r.killed else 'finished first'} after {r.seconds:5.1f} s; "
                      f"reached {r.reached}; violations {len(r.violations)}", flush=True)
                for violation in r.violations[:5]:
                    print(f"      {violation}", flush=True)
            started = time.monotonic()
            final = run_ingest(env, corpus.folder)
            final_s = time.monotonic() - started
            left = checker.unfinished(conn) + checker.check(conn) + dagster_leftovers(home,
                                                                                      corpus)
        killed = [r for r in rounds if r.killed]
        print(f"\n{len(killed)} of {len(rounds)} ingests killed "
              f"({sum(1 for r in killed if 0 < r.reached['indexed'] < r.changed)} while "
              "publishing documents); "
              f"rounds with violations: {sum(1 for r in rounds if r.violations)}")
        print(f"re-run after the last kill: {final_s:.1f} s, ingested {final['ingested']}, "
              f"failed {len(final['failed'])}; left unfinished or inconsistent: {len(left)}")
        for item in left[:10]:
            print(f"  {item}")
    finally:
        stop_embedded(settings)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
