"""What a person sees in the terminal (issue 18), with the real `kb` command, its own KB_HOME and
embedded database, real Dagster and the hashing embedder: `kb ingest` on a terminal draws its
progress and ends with a summary; through a pipe it prints one JSON object and keeps its logs in
a file; `kb status` describes the installation; `kb up`'s terminal shows addresses and one line
per run, never Dagster's DEBUG events."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "docs"
KB = str(Path(sys.executable).parent / "kb")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A log line of ours ("... INFO name: ...") or of Dagster's ("... - DEBUG - ...").
_LOG_LINE = re.compile(r"(^|\s)-?\s?(DEBUG|INFO)\s")


@pytest.fixture
def installation(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An installation of its own (short KB_HOME: the database's socket lives in it) with a copy
    of the samples to ingest, the hashing embedder."""
    home = Path("/tmp") / f"kbt18-{uuid.uuid4().hex[:8]}"
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "DAGSTER_"))}
    env |= {"KB_HOME": str(home), "KB_EMBEDDER": "hashing", "KB_DOCS_DIRS": str(docs),
            "COLUMNS": "120", "TERM": "xterm-256color"}
    yield env
    subprocess.run([KB, "db", "stop"], env=env, capture_output=True, timeout=60)
    shutil.rmtree(home, ignore_errors=True)


def _in_terminal(argv: list[str], env: dict[str, str], timeout: float = 300) -> tuple[str, int]:
    """Run `argv` with a pseudo-terminal as stdin, stdout and stderr, as a person's shell
    would; return what the terminal received (escape codes removed) and the exit status."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec, never return into pytest
        os.execve(argv[0], argv, env)
    received = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            received += chunk
        else:
            os.kill(pid, signal.SIGKILL)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return _ANSI.sub("", received.decode(errors="replace")), os.waitstatus_to_exitcode(status)


def test_kb_ingest_on_a_terminal_shows_progress_and_a_summary(installation, tmp_path):
    # Five copies of the samples: enough work for the display to be redrawn while it runs.
    docs = tmp_path / "copies"
    for n in range(5):
        shutil.copytree(installation["KB_DOCS_DIRS"], docs / f"copy{n}")
    files = sum(1 for p in docs.rglob("*") if p.is_file() and p.name != "_access.toml")
    screen, status = _in_terminal([KB, "ingest", str(docs)], installation)
    assert status == 0, screen[-3000:]
    # The live display, redrawn as the work went: files done of the total, each file as it is
    # parsed, passages embedded with their rate, elapsed time and ETA.
    parsed = {int(n) for n in re.findall(r"parsed (\d+)", screen)}
    assert len(parsed) >= 2 and max(parsed) == files, sorted(parsed)
    assert re.search(r"parsing \S+\.(md|pdf|docx|xlsx|pptx|html|txt|csv)", screen)
    assert re.search(rf"files .*\b0/{files}\b.* ETA", screen)
    assert re.search(rf"files .*\b{files}/{files}\b.* files/s", screen), screen[-3000:]
    assert re.search(r"passages .*\b(\d+)/\1\b.* passages/s", screen), screen[-3000:]
    # The summary table, and where the details went.
    summary = screen[screen.index(f"kb ingest: {files} documents"):]
    for row in (rf"ingested\s*│\s*{files}\b", r"unchanged\s*│\s*0\b", r"failed\s*│\s*0\b",
                r"chunks\s*│\s*\d+", r"time\s*│\s*[\d.]+ s"):
        assert re.search(row, summary), summary
    assert f"log: {installation['KB_HOME']}/logs/kb.log" in summary
    assert not _LOG_LINE.search(screen), screen[-3000:]


def test_kb_ingest_through_a_pipe_prints_one_json_object_and_no_info_lines(installation):
    done = subprocess.run([KB, "ingest", installation["KB_DOCS_DIRS"]], env=installation,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # Not a terminal: the human summary, no display; the contract's JSON with --json.
    assert "\x1b[" not in done.stdout + done.stderr
    assert done.stderr == ""
    again = subprocess.run([KB, "ingest", installation["KB_DOCS_DIRS"], "--json"],
                           env=installation, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    lines = again.stdout.splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["skipped"] == result["documents"] > 0 and result["ingested"] == 0
    assert not _LOG_LINE.search(again.stderr) and "\x1b[" not in again.stderr

    # The details are kept: Dagster's events of the in-process runs, each migration once.
    log = (Path(installation["KB_HOME"]) / "logs" / "kb.log").read_text()
    assert "DEBUG kb.dagster: ingest_documents" in log and "RUN_SUCCESS" in log
    applied = re.findall(r"applied migration (\S+)", log)
    assert applied and len(applied) == len(set(applied))


def test_kb_ingest_verbose_brings_the_logs_back(installation):
    done = subprocess.run([KB, "-v", "ingest", installation["KB_DOCS_DIRS"], "--json"],
                          env=installation, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.splitlines()) == 1
    assert "applied migration 001_schema.sql" in done.stderr
    assert "DEBUG kb.dagster: ingest_documents" in done.stderr


def test_kb_status_describes_the_installation(installation):
    subprocess.run([KB, "ingest", installation["KB_DOCS_DIRS"], "--json"], env=installation,
                   check=True, capture_output=True, timeout=300)
    done = subprocess.run([KB, "status", "--json"], env=installation, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    status = json.loads(done.stdout)
    assert status["home"] == installation["KB_HOME"]
    assert status["database"]["embedded"] and status["database"]["running"]
    assert status["database"]["size_bytes"] > 0
    assert (status["generation"]["id"], status["generation"]["state"]) == (1, "live")
    assert status["generation"]["model"].startswith("hashing")
    index = status["index"]
    assert index["documents"] == 21 and index["chunks"] > 21 and index["failures"] == 0
    assert index["groups"]["all-employees"] >= 1 and "hr" in index["groups"]
    assert status["rebuild"] is None and status["evaluation"] is None
    assert status["service"] == {"running": False, "url": None, "dagster_url": None}

    screen, code = _in_terminal([KB, "status"], installation, timeout=120)
    assert code == 0, screen
    for row in (r"database\s*│ embedded .*running, \d+ MB",
                r"index\s*│ generation 1, model hashing",
                r"documents\s*│ 21 \(\d+ chunks\), 0 failed", r"groups\s*│ all-employees \d+",
                r"service\s*│ not running", r"evaluation\s*│ none yet"):
        assert re.search(row, screen), screen

    subprocess.run([KB, "db", "stop"], env=installation, check=True, capture_output=True,
                   timeout=60)
    stopped = json.loads(subprocess.run([KB, "status", "--json"], env=installation, check=True,
                                        capture_output=True, text=True, timeout=60).stdout)
    assert stopped["database"]["running"] is False and stopped["index"] is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_kb_up_terminal_shows_addresses_and_runs_but_no_dagster_debug_lines(installation,
                                                                           tmp_path):
    docs = tmp_path / "small"
    docs.mkdir()
    (docs / "_access.toml").write_text('groups = ["all-employees"]\n')
    (docs / "規程.md").write_text("# 就業規則\n\n## 第22条\n副業は届出制とする。\n")
    env = {**installation, "KB_DOCS_DIRS": str(docs)}
    ports = (_free_port(), _free_port())
    terminal = tmp_path / "terminal.txt"
    with terminal.open("w") as out:
        up = subprocess.Popen([KB, "up", "--dagster-port", str(ports[0]), "--port",
                               str(ports[1])], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while "ingest_documents: success" not in terminal.read_text():
            assert up.poll() is None and time.monotonic() < deadline, terminal.read_text()
            time.sleep(2)
        status = json.loads(subprocess.run([KB, "status", "--json"], env=env, check=True,
                                           capture_output=True, text=True, timeout=60).stdout)
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=90) == 0
    shown = terminal.read_text()
    home = Path(installation["KB_HOME"])
    assert f"logs: {home / 'logs'}" in shown
    assert f"Dagster UI: http://127.0.0.1:{ports[0]}" in shown
    assert f"query service: http://127.0.0.1:{ports[1]}" in shown
    assert re.search(r"sensor docs_folder_sensor: run \w{8} ingest_documents: success in "
                     r"[\d.]+ s; 1 file: 1 indexed \(\d+ chunks\), 0 unchanged, 0 failed", shown)
    # Dagster's events and the servers' chatter went to the files, not here.
    assert "DEBUG" not in shown and "RUN_START" not in shown and "Uvicorn" not in shown
    assert "applied migration" not in shown and "alembic" not in shown
    daemon_log = (home / "logs" / "dagster-daemon.log").read_text()
    assert "RUN_START" in daemon_log or "docs_folder_sensor" in daemon_log

    assert status["service"] == {"running": True, "url": f"http://127.0.0.1:{ports[1]}",
                                 "dagster_url": f"http://127.0.0.1:{ports[0]}"}
    assert status["sensor"]["last_tick"] is not None
    assert status["sensor"]["last_run"]["job"] == "ingest_documents"
    assert status["sensor"]["last_run"]["status"] == "success"

    # The instance kb up wrote: no telemetry, no first-visit dialog in the UI.
    instance = yaml.safe_load((home / "dagster" / "dagster.yaml").read_text())
    assert instance["telemetry"] == {"enabled": False}
    assert instance["nux"] == {"enabled": False}
