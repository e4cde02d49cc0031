"""`kb backup` and `kb restore` as an administrator runs them: subprocesses, each installation
its own short KB_HOME and embedded PostgreSQL, the real Litestar app served over each, and the
folder sensor evaluated on the restored installation's own Dagster instance. One installation
is built once for the module (documents of two groups, an approved correction, tokens,
questions and feedback) and backed up while searches run; each test restores that one file.
The hashing embedder: these tests compare an installation with its restored copy, not
retrieval quality."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import httpx
import psycopg
import pytest

from kb_core.database import connect
from kb_core.migrations import SQL_DIR, prepare_database
from kb_core.settings import Settings
from kb_pipeline.dagster_home import dagster_instance
from kb_pipeline.defs.resources import resources_for
from kb_pipeline.defs.watched_folders.sensors import docs_folder_sensor
from kb_pipeline.runs import DOCUMENTS_PARTITIONS
from tests.web_app import CORPUS, HOLIDAY_QUESTION, free_port, served, web_app

pytestmark = pytest.mark.timeout(600)

KB = str(Path(sys.executable).parent / "kb")
CORRECTION = "2026年4月から、年次有給休暇は取得日の5営業日前までに申請することになりました。"
REVIEWER = "佐藤"
# What each token asks: its own group's documents (all-employees or hr), and the holiday
# question, whose answer cites the learned fact for all-employees only.
QUESTIONS = {
    "staff": [HOLIDAY_QUESTION, "社員食堂は何時から営業しますか", "結婚したときの特別休暇"],
    "hr": ["給与支給日はいつですか", HOLIDAY_QUESTION],
}
# A question asked "long ago": past the restored installation's retention (RETENTION_DAYS),
# well within the default 90 days, so only a restore that applies KB_QUERY_LOG_RETENTION_DAYS
# drops it.
OLD_QUESTION = "親族が亡くなったときの休暇は何日ですか"
RETENTION_DAYS, OLD_QUESTION_AGE_DAYS = 30, 45
COUNTS = {"documents", "chunks", "api_tokens", "query_log", "feedback", "corrections"}
LAST_MIGRATION = max(p.stem for p in SQL_DIR.glob("[0-9][0-9][0-9]_*.sql"))


# --- installations --------------------------------------------------------------------------

@dataclasses.dataclass
class Installation:
    home: Path
    env: dict[str, str]

    def settings(self) -> Settings:
        """Its settings as a command reads them, the database URL resolved (the embedded
        server started when needed)."""
        return prepare_database(Settings.from_env(self.env))


def installation(docs: Path, **extra: str) -> Installation:
    # Short: the server's Unix socket lives in KB_HOME (a 108-byte limit).
    home = Path("/tmp") / f"kbb-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "DAGSTER_"))}
    env |= {"KB_HOME": str(home), "KB_EMBEDDER": "hashing", "KB_DOCS_DIRS": str(docs), **extra}
    return Installation(home, env)


def remove(inst: Installation) -> None:
    subprocess.run([KB, "db", "stop"], env=inst.env, capture_output=True, timeout=60)
    shutil.rmtree(inst.home, ignore_errors=True)


def kb(inst: Installation, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([KB, *args], env=inst.env, capture_output=True, text=True,
                          timeout=timeout)


def kb_json(inst: Installation, *args: str, timeout: float = 300) -> dict:
    done = kb(inst, *args, "--json", timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def write_corpus(root: Path) -> Path:
    """tests.web_app's corpus under `root`: all/ readable by all-employees, hr/ by hr."""
    for rel, text in CORPUS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    (root / "all" / "_access.toml").write_text('groups = ["all-employees"]\n')
    (root / "hr" / "_access.toml").write_text('groups = ["hr"]\n')
    return root


# --- what an installation answers -------------------------------------------------------------

def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def search(client: httpx.Client, headers: dict[str, str], question: str) -> list[dict]:
    response = client.post("/v1/search", json={"query": question, "k": 10}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["hits"]


def ask(client: httpx.Client, headers: dict[str, str], question: str) -> dict:
    response = client.post("/v1/ask", json={"question": question}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def ranked(hits: list[dict]) -> list[tuple[int, float, str, bool]]:
    # The service names a file by its path under its watched folder's name, never by where
    # the folder is mounted (kb_search.knowledge_base.public).
    return [(h["chunk_id"], h["score"], h["path"], h["learned_fact"]) for h in hits]


def answered(answer: dict) -> dict:
    """An answer without what differs between two askings (its id, its time)."""
    return {k: answer[k] for k in ("answer", "found", "verified", "citations")}


def observe(client: httpx.Client, tokens: dict[str, str]) -> dict:
    """Every token's searches (ranked hits) and answers, keyed by (token, question)."""
    return {(who, question): (ranked(search(client, bearer(tokens[who]), question)),
                              answered(ask(client, bearer(tokens[who]), question)))
            for who, questions in QUESTIONS.items() for question in questions}


def same_ranking(got: list[tuple], want: list[tuple]) -> None:
    """The same chunks in the same order with the same scores (within 1e-6)."""
    assert [(c, p, f) for c, _, p, f in got] == [(c, p, f) for c, _, p, f in want]
    assert all(abs(a[1] - b[1]) <= 1e-6 for a, b in zip(got, want, strict=True)), (got, want)


def evaluate_sensor(settings: Settings, instance: dg.DagsterInstance) -> dg.SensorResult:
    """One evaluation of the folder sensor as the daemon ticks it; its requests not applied."""
    with dg.build_sensor_context(instance=instance, resources=resources_for(settings)) as context:
        return docs_folder_sensor(context)


def assert_skips_every_file(result: dg.SensorResult) -> None:
    # No run and no new or deleted partition: every file is known to both the catalogue and
    # Dagster, and unchanged.
    assert not result.run_requests and not result.dynamic_partitions_requests, result
    files = len(CORPUS)
    assert f"{files} files: 0 to ingest in 0 runs, {files} unchanged," in (
        result.skip_reason.skip_message), result.skip_reason.skip_message


def sensor_on(inst: Installation) -> tuple[dg.SensorResult, Settings, set[str]]:
    """The folder sensor evaluated on `inst`'s own Dagster instance (its KB_HOME's
    dagster.yaml, its database `dagster`) with the resources of its configuration; also the
    documents partitions it holds."""
    settings = inst.settings()
    with dagster_instance(settings) as instance:
        result = evaluate_sensor(settings, instance)
        partitions = set(instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS.name))
    return result, settings, partitions


def rows(url: str, sql: str) -> list[tuple]:
    with connect(url) as conn:
        return conn.execute(sql).fetchall()


QUERY_LOG = "SELECT id, question, answer, hits FROM query_log ORDER BY id"
FEEDBACK = "SELECT query_id, helpful, comment FROM feedback ORDER BY id"
VECTORS = "SELECT chunk_id, view_index, embedding::text FROM chunk_vectors ORDER BY 1, 2"
CHUNKS = ("SELECT c.id, d.source_uri, c.content FROM chunks c "
          "JOIN documents d ON d.id = c.document_id ORDER BY c.id")


# --- the installation backed up ---------------------------------------------------------------

class Searching(threading.Thread):
    """Searches each token's questions over and over against the served app until stopped,
    recording when each ran and what it found."""

    def __init__(self, base: str, tokens: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.base, self.tokens = base, tokens
        self.stop = threading.Event()
        self.done: list[tuple[float, float, str, str, int, list[tuple] | str]] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=30) as client:
            while not self.stop.is_set():
                for who, questions in QUESTIONS.items():
                    for question in questions:
                        began = time.monotonic()
                        response = client.post("/v1/search", json={"query": question, "k": 10},
                                               headers=bearer(self.tokens[who]))
                        found = (ranked(response.json()["hits"])
                                 if response.status_code == 200 else response.text)
                        self.done.append((began, time.monotonic(), who, question,
                                          response.status_code, found))


@dataclasses.dataclass
class Source:
    inst: Installation
    docs: Path
    url: str
    tokens: dict[str, str]  # name → token (retired: revoked before the backup)
    before: dict  # observe() on the installation, before the backup
    old_query_id: str
    query_log: list[tuple]  # as the backup holds them
    feedback: list[tuple]
    counts: dict[str, int]
    vectors: list[tuple]
    chunks: list[tuple]
    partitions: set[str]
    sensor_before: dg.SensorResult
    path: Path  # the backup file
    backup: dict  # `kb backup --json`
    backup_window: tuple[float, float]
    searched: list[tuple]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    folder = tmp_path_factory.mktemp("backup")
    docs = write_corpus(folder / "corpus").resolve()
    inst = installation(docs)
    try:
        yield _build_and_back_up(inst, docs, folder / "kb.kbbackup")
    finally:
        remove(inst)


def _build_and_back_up(inst: Installation, docs: Path, path: Path) -> Source:
    ingested = kb_json(inst, "ingest", str(docs))
    assert (ingested["ingested"], ingested["failed"]) == (len(CORPUS), []), ingested
    tokens = {name: kb_json(inst, "token", "create", name, "--groups", groups)["token"]
              for name, groups in (("staff", "all-employees"), ("hr", "hr"),
                                   ("retired", "all-employees"))}
    assert kb_json(inst, "token", "revoke", "retired") == {"revoked": True}
    url = kb_json(inst, "db", "url")["url"]
    settings = dataclasses.replace(Settings.from_env(inst.env), database_url=url)

    with served(web_app(settings), free_port()) as base, \
            httpx.Client(base_url=base, timeout=60) as client:
        staff = bearer(tokens["staff"])
        # A correction of the answer the staff token got, approved in the shell.
        answer = ask(client, staff, HOLIDAY_QUESTION)
        submitted = client.post("/v1/corrections", headers=staff, json={
            "query_id": answer["query_id"], "correction": CORRECTION,
            "chunk_ids": [c["chunk_id"] for c in answer["citations"] if not c["learned_fact"]]})
        assert submitted.status_code == 201, submitted.text
        correction_id = submitted.json()["id"]
        assert kb_json(inst, "corrections", "approve", str(correction_id), "--reviewer",
                       REVIEWER)["status"] == "approved"

        before = observe(client, tokens)
        # The ground the restored copy is held to: the learned fact is cited for
        # all-employees, and each group finds only its own documents.
        _, holiday = before[("staff", HOLIDAY_QUESTION)]
        assert _cites_the_fact(holiday), holiday
        assert not _cites_the_fact(before[("hr", HOLIDAY_QUESTION)][1])
        assert all("/hr/" in uri for (who, _), (hits, _) in before.items() if who == "hr"
                   for _, _, uri, _ in hits)
        assert all("/hr/" not in uri for (who, _), (hits, _) in before.items()
                   if who == "staff" for _, _, uri, _ in hits)
        assert client.post("/v1/search", json={"query": "休暇"},
                           headers=bearer(tokens["retired"])).status_code == 401

        helpful = client.post("/v1/feedback", headers=staff, json={
            "query_id": ask(client, staff, HOLIDAY_QUESTION)["query_id"], "helpful": True,
            "comment": "5営業日前に変わったと分かった"})
        assert helpful.status_code == 200, helpful.text
        old = ask(client, staff, OLD_QUESTION)["query_id"]
        # Backdated, as 45 days cannot be waited for; the app's own purge ran at its start.
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE query_log SET created_at = now() - make_interval(days => %s) "
                         "WHERE id = %s", (OLD_QUESTION_AGE_DAYS, old))
            counts = dict(zip(sorted(COUNTS), conn.execute(
                "SELECT " + ", ".join(f"(SELECT count(*) FROM {t})" for t in sorted(COUNTS))
            ).fetchone(), strict=True))
        query_log, feedback = rows(url, QUERY_LOG), rows(url, FEEDBACK)
        vectors, chunks = rows(url, VECTORS), rows(url, CHUNKS)

        # Searches run on, in a thread, while `kb backup` dumps both databases.
        searching = Searching(base, tokens)
        searching.start()
        time.sleep(0.5)
        began = time.monotonic()
        done = kb(inst, "backup", str(path), "--json", timeout=300)
        ended = time.monotonic()
        time.sleep(0.2)
        searching.stop.set()
        searching.join(timeout=60)
        assert done.returncode == 0, done.stderr[-3000:]
        backup = json.loads(done.stdout)

    # The source's own sensor skips every file: the ground for the restored one's.
    monkeypatch = pytest.MonkeyPatch()
    try:
        sensor_before, _, partitions = sensor_on(inst)
    finally:
        monkeypatch.undo()
    return Source(inst, docs, url, tokens, before, old, query_log, feedback, counts, vectors,
                  chunks, partitions, sensor_before, path, backup, (began, ended),
                  searching.done)


def _cites_the_fact(answer: dict) -> bool:
    return any(c["learned_fact"] and c["heading"].startswith(f"承認: {REVIEWER}（")
               and CORRECTION[:40] in c["quote"] for c in answer["citations"])


@pytest.fixture
def installations() -> Iterator[list[Installation]]:
    """The installations a test restores into: afterwards their servers are stopped and their
    KB_HOMEs removed, whatever the restore did."""
    made: list[Installation] = []
    yield made
    for inst in made:
        remove(inst)


# --- the tests --------------------------------------------------------------------------------

def test_backup_taken_while_searches_run_is_private_and_describes_both_databases(source):
    backup, manifest = source.backup, source.backup["manifest"]
    # Only its owner may read it: it holds every group's documents and employees' questions.
    assert stat.S_IMODE(source.path.stat().st_mode) == 0o600
    assert backup["path"] == str(source.path)
    assert backup["bytes"] == source.path.stat().st_size
    assert isinstance(backup["seconds"], float) and backup["seconds"] >= 0
    assert manifest["format"] == 1
    assert manifest["pipeline_version"] and manifest["embedding_model"]
    assert manifest["roots"] == [str(source.docs)]
    assert manifest["counts"] == source.counts
    assert source.counts["corrections"] == 1 and source.counts["feedback"] == 1
    assert source.counts["api_tokens"] == 3 and source.counts["documents"] == len(CORPUS)
    assert set(manifest["databases"]) == {"kb", "dagster"}
    for database in manifest["databases"].values():
        assert database["bytes"] > 0 and len(database["sha256"]) == 64
        int(database["sha256"], 16)

    # The searches ran on while the backup was taken, every one answered as before it.
    began, ended = source.backup_window
    during = [s for s in source.searched if s[0] >= began and s[1] <= ended]
    assert during, "no search ran within the backup"
    for _, _, who, question, status, found in source.searched:
        assert status == 200, found
        same_ranking(found, source.before[(who, question)][0])
    # The schema named as migrations are (sql/NNN_name.sql → NNN_name).
    assert manifest["schema"] == LAST_MIGRATION


def test_backup_never_overwrites_a_file(source):
    held = source.path.read_bytes()
    done = kb(source.inst, "backup", str(source.path))
    assert done.returncode == 1 and str(source.path) in done.stderr, done.stderr
    assert source.path.read_bytes() == held


def test_backup_refuses_an_external_database(source, tmp_path):
    target = tmp_path / "external.kbbackup"
    inst = dataclasses.replace(source.inst,
                               env={**source.inst.env, "KB_DATABASE_URL": source.url})
    done = kb(inst, "backup", str(target))
    assert done.returncode == 2 and "KB_DATABASE_URL" in done.stderr, done.stderr
    assert not target.exists()


def test_restored_installation_answers_as_before_with_its_token_log_feedback_and_sensor(
        source, installations, monkeypatch):
    inst = installation(source.docs, KB_QUERY_LOG_RETENTION_DAYS=str(RETENTION_DAYS))
    installations.append(inst)
    restored = kb_json(inst, "restore", str(source.path), timeout=600)

    assert restored["path"] == str(source.path) and restored["seconds"] >= 0
    assert restored["migrated"] == []  # the backup is of this schema: nothing to migrate
    assert restored["purged_queries"] == 1 and restored["mapped"] == {}
    assert restored["counts"] == source.counts | {"query_log": source.counts["query_log"] - 1}
    # The restore stopped the server it started.
    assert kb_json(inst, "db", "status")["running"] is False

    # First the sensor, as `kb up` would tick it: every file known and unchanged; having read
    # every folder's access rules, it lets the service say ready (test_service.py: /readyz).
    assert_skips_every_file(source.sensor_before)
    awaiting = "SELECT rules_reread_at IS NULL FROM restores"
    assert rows(inst.settings().database_url, awaiting) == [(True,)]
    result, settings, partitions = sensor_on(inst)
    assert_skips_every_file(result)
    assert partitions == source.partitions
    assert rows(settings.database_url, awaiting) == [(False,)]

    # The query log (less the question past the retention) and the feedback, as backed up.
    assert rows(settings.database_url, QUERY_LOG) == [
        r for r in source.query_log if str(r[0]) != source.old_query_id]
    assert source.old_query_id in {str(r[0]) for r in source.query_log}  # it was backed up
    assert rows(settings.database_url, FEEDBACK) == source.feedback
    assert rows(settings.database_url, VECTORS) == source.vectors
    assert rows(settings.database_url, "SELECT status FROM corrections") == [("approved",)]

    with served(web_app(settings), free_port()) as base, \
            httpx.Client(base_url=base, timeout=60) as client:
        after = observe(client, source.tokens)  # the tokens still valid: each answer is a 200
        assert after.keys() == source.before.keys()
        for key, (hits, answer) in after.items():
            same_ranking(hits, source.before[key][0])
            assert answer == source.before[key][1], key
        assert _cites_the_fact(after[("staff", HOLIDAY_QUESTION)][1])
        # Revoked before the backup, revoked after it; and tokens are checked at all.
        for token in (source.tokens["retired"], "kb_" + "x" * 40):
            refused = client.post("/v1/search", json={"query": "休暇"}, headers=bearer(token))
            assert refused.status_code == 401
    assert restored["schema"] == LAST_MIGRATION


def test_restore_with_a_map_watches_the_copied_folder_without_re_embedding(
        source, installations, monkeypatch, tmp_path):
    # The same documents, copied (times kept) to another mount point.
    moved = tmp_path / "mnt" / "share" / source.docs.name
    shutil.copytree(source.docs, moved)
    old, new = str(source.docs), str(moved.resolve())
    inst = installation(Path(new))
    installations.append(inst)
    restored = kb_json(inst, "restore", str(source.path), "--map", f"{old}={new}", timeout=600)
    assert set(restored["mapped"]) == {old} and restored["mapped"][old] >= len(CORPUS)

    result, settings, partitions = sensor_on(inst)
    assert_skips_every_file(result)
    assert partitions == {new + p[len(old):] for p in source.partitions}

    # Not re-embedded: the same chunks and vectors, only their files' paths moved.
    url = settings.database_url
    assert rows(url, VECTORS) == source.vectors
    assert rows(url, CHUNKS) == [(c, new + u[len(old):], t) for c, u, t in source.chunks]
    # The approved correction holds for the same bytes at their new path: still approved, its
    # learned fact still indexed (not retired for review as if its document had changed).
    assert rows(url, "SELECT status FROM corrections") == [("approved",)]
    assert len(rows(url, "SELECT id FROM learned_facts")) == 1
    moved_uris = rows(url, "SELECT source_uri FROM documents")
    assert moved_uris and all(uri.startswith(new + "/") for (uri,) in moved_uris)

    # The folder keeps its name at its new mount point, so the service names every file as
    # before: the same searches and the same answers, the learned fact cited.
    with served(web_app(settings), free_port()) as base, \
            httpx.Client(base_url=base, timeout=60) as client:
        after = observe(client, source.tokens)
    assert _cites_the_fact(after[("staff", HOLIDAY_QUESTION)][1])
    for key, (hits, answer) in after.items():
        same_ranking(hits, source.before[key][0])
        assert answer == source.before[key][1], key


def _damaged(backup: Path, how: str, folder: Path) -> Path:
    """A copy of `backup` cut in half or with one bit flipped: in the first header, inside the
    data, and in the very last byte (past every stored member: any byte is to be checked)."""
    data = bytearray(backup.read_bytes())
    if how == "truncated":
        data = data[: len(data) // 2]
    else:
        at = {"first byte": 0, "middle byte": len(data) // 2, "last byte": len(data) - 1}[how]
        data[at] ^= 0x01
    target = folder / f"{how.replace(' ', '-')}.kbbackup"
    target.write_bytes(bytes(data))
    return target


def held(home: Path) -> list[tuple[str, bytes | None]]:
    """Everything under KB_HOME, with the files' bytes, but the log every `kb` command writes
    under KB_HOME/logs before it does anything (a refused restore's own log is not a restore)."""
    if not home.exists():
        return []
    return sorted((str(p.relative_to(home)), p.read_bytes() if p.is_file() else None)
                  for p in home.rglob("*") if p.relative_to(home).parts[0] != "logs")


@pytest.mark.parametrize("how", ["truncated", "first byte", "middle byte", "last byte"])
@pytest.mark.parametrize("home_was", ["absent", "empty"])
def test_a_truncated_or_altered_backup_is_refused_and_nothing_is_restored(
        source, installations, tmp_path, how, home_was):
    damaged = _damaged(source.path, how, tmp_path)
    inst = installation(source.docs)
    installations.append(inst)
    if home_was == "empty":
        inst.home.mkdir()
    done = kb(inst, "restore", str(damaged), timeout=300)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "backup" in done.stderr.lower(), done.stderr
    # Nothing half-restored: no data directory, no Dagster home, no server of it left running.
    assert held(inst.home) == []
    assert kb_json(inst, "db", "status")["running"] is False


def test_restore_into_a_home_that_holds_something_is_refused_naming_it(
        source, installations):
    inst = installation(source.docs)
    installations.append(inst)
    (inst.home / "pgdata").mkdir(parents=True)
    (inst.home / "pgdata" / "PG_VERSION").write_text("16\n")
    (inst.home / "notes.txt").write_text("前の環境のメモ\n", encoding="utf-8")
    before = held(inst.home)
    done = kb(inst, "restore", str(source.path))
    assert done.returncode == 1, done.stdout
    assert "notes.txt" in done.stderr and "pgdata" in done.stderr, done.stderr
    assert held(inst.home) == before
