"""`kb up` under a supervisor (issue 19), with real processes: started in a session of its own
as a process manager starts it, every stop signal stops the query service, the Dagster
webserver, daemon and code servers and the embedded PostgreSQL and exits 0; so does a SIGTERM
sent to `make up`'s make alone (issue 48); a SIGKILLed `kb up` leaves nothing behind; busy
ports, a second `kb up` on one installation and a stale postmaster.pid are recognised before
they cause harm. The hashing embedder keeps start-up near 15 s."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

from kb_core.database_server import embedded_status
from kb_core.settings import REPO_ROOT, Settings

VENV = Path(sys.executable).parent.parent
KB = str(VENV / "bin" / "kb")
STOP_BOUND_S = 60  # children's grace (20 s) + PostgreSQL's (15 s + 10 s), and some slack


@pytest.fixture(scope="module")
def installation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One installation for the module's `kb up`s (each stops its database, so each starts
    it again): a short KB_HOME (the database's Unix socket lives in it), two small documents,
    the hashing embedder."""
    home = Path("/tmp") / f"kbs-{uuid.uuid4().hex[:8]}"
    docs = tmp_path_factory.mktemp("up") / "docs"
    docs.mkdir()
    (docs / "_access.toml").write_text('groups = ["all-employees"]\n')
    (docs / "規程.md").write_text("# 就業規則\n\n## 第22条\n副業は届出制とする。\n")
    (docs / "保証.md").write_text("# 保証\n\nZP-2041の保証期間は1年です。\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "DAGSTER_"))}
    env |= {"KB_HOME": str(home), "KB_DOCS_DIRS": str(docs), "KB_EMBEDDER": "hashing"}
    yield env
    subprocess.run([KB, "db", "stop"], env=env, capture_output=True, timeout=60)
    shutil.rmtree(home, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _alive(processes: list[psutil.Process]) -> list[str]:
    """Those still running (psutil.Process knows its start time: a reused pid is not it)."""
    alive = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{p.pid} {' '.join(p.cmdline())[:150]}")
        except psutil.NoSuchProcess:
            continue
    return alive


class Up:
    """A running `kb up` and what it started."""

    def __init__(self, env: dict[str, str], log: Path, make: bool = False) -> None:
        """`kb up`, or with `make`, `make up` (then `process` is make's)."""
        self.env, self.log = env, log
        self.ports = (_free_port(), _free_port())
        command, env = (self._make_up(env) if make else
                        ([KB, "up", "--dagster-port", str(self.ports[0]),
                          "--port", str(self.ports[1])], env))
        # As `setsid kb up &` in a script starts it: a session of its own, SIGINT ignored.
        self.process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"),
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))

    def _make_up(self, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        # This environment's kb, whatever pyproject.toml's time: `-o` keeps make from
        # reinstalling it. Without a surrounding `make test`'s flags and variables.
        command = ["make", "-o", f"{VENV}/.installed", "up", f"VENV={VENV}",
                   f"DAGSTER_PORT={self.ports[0]}", f"SERVICE_PORT={self.ports[1]}"]
        return command, {k: v for k, v in env.items() if not k.startswith(("MAKE", "MFLAGS"))}

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 150) -> None:
        """Wait until both servers answer and both Dagster code servers run."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.output()[-3000:]
            if len([p for p in self.descendants() if "grpc" in _command(p)]) >= 2 \
                    and self._answers():
                return
            time.sleep(1)
        raise AssertionError(f"kb up not ready in {timeout} s:\n{self.output()[-3000:]}")

    def _answers(self) -> bool:
        dagster, service = self.ports
        try:
            return (httpx.get(f"http://127.0.0.1:{service}/healthz", timeout=2).is_success
                    and httpx.get(f"http://127.0.0.1:{dagster}/server_info",
                                  timeout=2).is_success)
        except httpx.HTTPError:
            return False

    def descendants(self) -> list[psutil.Process]:
        """Its watchdog, servers, code servers, run workers."""
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def postmaster(self) -> list[psutil.Process]:
        pid = embedded_status(Settings.from_env(self.env))["pid"]
        return [psutil.Process(pid)] if pid else []


def _ignores_sigterm(process: psutil.Process) -> bool:
    try:
        status = Path(f"/proc/{process.pid}/status").read_text()
    except FileNotFoundError:  # it ended meanwhile (a run worker, say)
        return False
    for line in status.splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    raise AssertionError(f"no SigIgn for {process.pid}")


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


@contextmanager
def kb_up(env: dict[str, str], log: Path, make: bool = False) -> Iterator[Up]:
    """A ready `kb up` (or `make up`) in its own session. Whatever of it still runs afterwards
    is killed, and its PostgreSQL stopped, so a failing test leaves nothing behind either."""
    up = Up(env, log, make)
    seen: list[psutil.Process] = []
    try:
        up.wait_ready()
        seen = up.descendants()
        yield up
    finally:
        up.process.kill()
        for process in seen + up.descendants():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        up.process.wait(timeout=30)
        subprocess.run([KB, "db", "stop"], env=env, capture_output=True, timeout=60)


def _gone_within(processes: list[psutil.Process], seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while (alive := _alive(processes)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive


@pytest.mark.slow
@pytest.mark.parametrize("signals", [
    (signal.SIGTERM,), (signal.SIGHUP,), (signal.SIGINT,), (signal.SIGINT, signal.SIGTERM),
], ids=["SIGTERM", "SIGHUP", "SIGINT", "SIGINT-then-SIGTERM"])
def test_a_stop_signal_stops_everything_and_exits_0(installation, tmp_path, signals):
    with kb_up(installation, tmp_path / "up.log") as up:
        started = up.descendants() + up.postmaster()
        # watchdog, 3 servers, 2 code servers, PostgreSQL
        assert len(started) >= 7, [_command(p) for p in started]
        # None ignores SIGTERM (a child that inherited an ignored SIGINT might: Dagster gives
        # SIGTERM whatever SIGINT does); the watchdog handles it, to outlive kb up. The
        # multiprocessing resource tracker ignores it by design and ends with its parent.
        assert [_command(p) for p in started if _ignores_sigterm(p)
                and "resource_tracker" not in _command(p)] == []
        sent = time.monotonic()
        for sig in signals:
            up.process.send_signal(sig)
            time.sleep(0.5)
        status = up.process.wait(timeout=STOP_BOUND_S)
        took = time.monotonic() - sent
        assert status == 0, up.output()[-3000:]
        _assert_all_stopped(up, started, installation)
        print(f"{'+'.join(s.name for s in signals)}: stopped and exited in {took:.1f} s")
        daemon_log = (Path(installation["KB_HOME"]) / "logs" / "dagster-daemon.log").read_text()
        assert "Received interrupt, shutting down daemon threads" in daemon_log.split(
            "Instance is configured with the following daemons")[-1]
        if len(signals) > 1:
            assert "hurrying the stop" in up.output()
        else:
            # The query service stops within the grace period. Dagster's processes may take
            # longer on a loaded machine (a code server first finishes the calls in flight, for
            # up to 60 s; the daemon waits up to 30 s for each of its threads): they are then
            # killed, and what was left is named.
            assert "query-service did not stop" not in up.output()


def _assert_all_stopped(up: Up, started: list[psutil.Process], installation: dict[str, str]
                        ) -> None:
    assert _gone_within(started, 5) == [], up.output()[-3000:]
    assert all(_port_free(port) for port in up.ports)
    assert embedded_status(Settings.from_env(installation))["running"] is False


@pytest.mark.slow
def test_sigterm_to_make_alone_stops_everything_that_make_up_started(installation, tmp_path):
    """make passes SIGTERM on to its recipe's process, waits for it, then dies of it: the
    recipe's `exec` makes that process `kb up`, not a shell. (SIGINT and SIGHUP, which make
    does not pass on, tests/unit/test_parent_watch.py sends to make with a stand-in.)"""
    with kb_up(installation, tmp_path / "up.log", make=True) as up:
        started = up.descendants() + up.postmaster()
        [kb] = [p for p in started if p.ppid() == up.process.pid]
        assert kb.cmdline()[1:4] == [KB, "up", "--stop-with-parent"]  # `exec`: not a shell
        sent = time.monotonic()
        up.process.send_signal(signal.SIGTERM)
        status = up.process.wait(timeout=STOP_BOUND_S)
        took = time.monotonic() - sent
        assert status == -signal.SIGTERM, up.output()[-3000:]
        _assert_all_stopped(up, started, installation)
        assert "SIGTERM: stopping" in up.output()
        assert "without passing it on" not in up.output()  # make passed it on
        assert "hurrying the stop" not in up.output()
        assert "stopped in" in up.output()
        print(f"make up, SIGTERM to make: stopped and exited in {took:.1f} s")


@pytest.mark.slow
def test_a_killed_kb_up_leaves_nothing_behind(installation, tmp_path):
    # A server left running by an earlier command is taken over, and said so.
    subprocess.run([KB, "db", "start"], env=installation, check=True, capture_output=True,
                   timeout=120)
    with kb_up(installation, tmp_path / "up.log") as up:
        assert "reusing the PostgreSQL already running" in up.output()
        # One kb up per installation: a second one is refused at once, naming the first.
        second = subprocess.run([KB, "up", "--dagster-port", str(_free_port()), "--port",
                                 str(_free_port())], env=installation, capture_output=True,
                                text=True, timeout=60)
        assert second.returncode == 1
        assert "kb up already runs" in second.stderr
        assert f"pid {up.process.pid}" in second.stderr

        started = up.descendants() + up.postmaster()
        killed = time.monotonic()
        up.process.kill()
        up.process.wait()
        # Its watchdog stops the children's groups and then PostgreSQL.
        assert _gone_within(started, STOP_BOUND_S) == [], up.output()[-3000:]
        assert all(_port_free(port) for port in up.ports)
        assert embedded_status(Settings.from_env(installation))["running"] is False
        assert "died without stopping what it started" in up.output()
        print(f"SIGKILL: everything stopped by the watchdog in {time.monotonic() - killed:.1f} s")


def test_a_busy_port_is_refused_before_anything_starts(tmp_path):
    home = Path("/tmp") / f"kbs-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "DAGSTER_"))}
    env |= {"KB_HOME": str(home), "KB_EMBEDDER": "hashing"}
    try:
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            port = holder.getsockname()[1]
            done = subprocess.run([KB, "up", "--dagster-port", str(_free_port()),
                                   "--port", str(port)], env=env, capture_output=True,
                                  text=True, timeout=60)
        assert done.returncode == 1
        assert f"127.0.0.1:{port} (--port)" in done.stderr
        assert f"held by pid {os.getpid()}" in done.stderr
        assert not (home / "pgdata").exists()  # nothing was started
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_stale_postmaster_pid_naming_another_process_is_not_taken_for_a_server(
        installation):
    """After a crash or a reboot, postmaster.pid may name a pid that another process now has:
    `kb db status` says stopped, `kb db stop` signals nobody, and `kb db start` removes the
    file, says so and starts a server, instead of handing out a dead socket."""
    def kb_db(action: str) -> subprocess.CompletedProcess:
        return subprocess.run([KB, "db", action, "--json"], env=installation, check=True,
                              capture_output=True, text=True, timeout=120)

    kb_db("start")
    pid_file = Path(installation["KB_HOME"]) / "pgdata" / "postmaster.pid"
    lines = pid_file.read_text().splitlines()
    kb_db("stop")
    with subprocess.Popen(["sleep", "60"]) as stranger:
        try:
            pid_file.write_text("\n".join([str(stranger.pid), *lines[1:]]) + "\n")
            assert json.loads(kb_db("status").stdout)["running"] is False
            assert json.loads(kb_db("stop").stdout) == {"stopped": False}
            started = kb_db("start")
            assert "is not this installation's PostgreSQL" in started.stderr
            assert stranger.poll() is None
            with psycopg.connect(json.loads(started.stdout)["url"]) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        finally:
            stranger.kill()
            kb_db("stop")
