"""`kb up`: the whole product on one machine, on 127.0.0.1, until SIGINT, SIGTERM or SIGHUP."""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import dagster as dg
import psutil
from dagster._core.storage.tags import GRPC_INFO_TAG

from kb_cli.addresses import forget_addresses, record_addresses
from kb_cli.logs import LOG_FILE, narrate
from kb_cli.supervision import STOP_SIGNALS, StopSignals, Watchdog, stop_groups
from kb_cli.up_narration import ErrorLines, RunLines
from kb_core.database_server import STOP_GRACE_S, embedded_status, stop_embedded
from kb_core.migrations import prepare_database
from kb_core.settings import REPO_ROOT, Settings
from kb_pipeline.dagster_home import dagster_instance
from kb_pipeline.ocr import missing_engine

__all__ = ["run"]

log = logging.getLogger("kb.up")

# How often the terminal learns of finished runs (a query of the run storage).
_RUNS_POLL_S = 2.0


def _bin(name: str) -> str:
    # The console scripts of this environment, not whatever else is on PATH.
    return str(Path(sys.executable).parent / name)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Start database, migrations, Dagster webserver and daemon, query service; stop them all
    on SIGINT, SIGTERM or SIGHUP (exit status 0; with --stop-with-parent, also when the parent
    ends or starts to end on one of them) or when one of them exits (1)."""
    narrate(log.name)
    signals = StopSignals()
    if args.parent is not None:  # --stop-with-parent
        args.parent.watch(STOP_SIGNALS, stopping=lambda: signals.count > 0)
    ports = {"--dagster-port": args.dagster_port, "--port": args.port}
    if busy := _unusable_port(ports):
        log.error("%s", busy)
        return 1
    if (lock := _lock_installation(settings.home)) is None:
        log.error("kb up already runs, or is still stopping, on %s (pid %s)", settings.home,
                  _lock_holder(settings.home))
        return 1
    embedded = settings.database_url is None
    watchdog = Watchdog.start(settings.home if embedded else None, keep_open=(lock,))
    children: dict[str, subprocess.Popen] = {}
    try:
        running = embedded_status(settings)["pid"] if embedded else None
        settings = prepare_database(settings)
        if running and embedded_status(settings)["pid"] == running:
            log.info("reusing the PostgreSQL already running on %s (pid %d); kb up stops it "
                     "when it stops", settings.home / "pgdata", running)
        env = settings.environment()  # the children read the settings resolved here
        _fail_runs_left_started(settings)
        # The development sign-in, if asked for, goes to the query service as given.
        serve_options = (["--dev-user", args.dev_user, "--groups", ",".join(args.groups or ())]
                         if args.dev_user else [])
        commands = _commands(ports, serve_options)
        logs = {name: settings.log_dir / f"{name}.log" for name in commands}
        errors = ErrorLines(logs)
        for name, command in commands.items():
            if signals.count:
                break
            # Their output (Dagster's event logs at DEBUG among it) goes to files, not here.
            with logs[name].open("ab") as output:
                children[name] = subprocess.Popen(command, cwd=REPO_ROOT, env=env,
                                                  start_new_session=True, stdout=output,
                                                  stderr=subprocess.STDOUT)
            watchdog.watch(name, children[name].pid)
            log.info("started %s (pid %d)", name, children[name].pid)
        if not signals.count:
            record_addresses(settings.home, {
                "dagster": f"http://127.0.0.1:{args.dagster_port}",
                "service": f"http://127.0.0.1:{args.port}"})
            log.info("logs: %s (%s)", settings.log_dir,
                     ", ".join([LOG_FILE, *(p.name for p in logs.values())]))
            log.info("Dagster UI: http://127.0.0.1:%d  query service: http://127.0.0.1:%d  "
                     "watching: %s", args.dagster_port, args.port,
                     ", ".join(map(str, settings.docs_dirs)))
            log.info("the folder sensor ingests new and changed documents; Ctrl-C, SIGTERM "
                     "or SIGHUP stops everything")
            if missing := missing_engine():
                log.warning("scanned PDFs and images wait for OCR: %s; the folder sensor reads "
                            "them at its first tick after that", missing)
        return _supervise(children, signals, settings, logs, errors)
    finally:
        stopping = time.monotonic()
        forget_addresses(settings.home)
        hurried = _stop(children, signals)
        if embedded:
            stop_embedded(settings, grace_s=3 if hurried else STOP_GRACE_S)
        watchdog.release()
        os.close(lock)
        log.info("stopped in %.1f s", time.monotonic() - stopping)


def _commands(ports: Mapping[str, int], serve_options: list[str]) -> dict[str, list[str]]:
    workspace = str(REPO_ROOT / "workspace.yaml")
    return {
        "dagster-webserver": [_bin("dagster-webserver"), "-h", "127.0.0.1",
                              "-p", str(ports["--dagster-port"]), "-w", workspace],
        "dagster-daemon": [_bin("dagster-daemon"), "run", "-w", workspace],
        "query-service": [_bin("kb"), "serve", "--host", "127.0.0.1",
                          "--port", str(ports["--port"]), *serve_options],
    }


def _supervise(children: Mapping[str, subprocess.Popen], signals: StopSignals,
               settings: Settings, logs: Mapping[str, Path], errors: ErrorLines) -> int:
    """Wait for a stop signal (0) or for a child to exit (1), telling meanwhile each finished
    run and each error the children log."""
    with dagster_instance(settings) as instance:
        runs = RunLines(instance, settings.database_url)
        next_look = 0.0
        try:
            while not signals.count:
                errors.poll()
                if time.monotonic() >= next_look:
                    runs.poll()
                    next_look = time.monotonic() + _RUNS_POLL_S
                for name, child in children.items():
                    if child.poll() is not None:
                        errors.poll()
                        log.error("%s exited with status %s; stopping (its log: %s)", name,
                                  child.returncode, logs[name])
                        return 1
                time.sleep(0.5)
        finally:
            errors.close()
    return 0


def _stop(children: Mapping[str, subprocess.Popen], signals: StopSignals) -> bool:
    """Stop every child's process group (the Dagster code servers and run workers are in
    them); return True when another signal asked to hurry."""
    asked = signals.count
    stop_groups({name: child.pid for name, child in children.items()},
                hurry=lambda: signals.count > asked,
                reap=lambda: [child.poll() for child in children.values()])
    for child in children.values():
        child.wait()
    return signals.count > asked


def _fail_runs_left_started(settings: Settings) -> None:
    """Mark failed the runs that an earlier `kb up`'s daemon launched and that never finished:
    their workers died with it (killed after the grace period, or with it). Dagster's default
    run launcher cannot check a worker, so run monitoring would leave them STARTED for ever,
    each holding a slot of the run queue and, for the sensor, its files. No daemon of this
    installation runs now: this `kb up` holds its lock."""
    with dagster_instance(settings) as instance:
        unfinished = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
        for run in instance.get_runs(dg.RunsFilter(statuses=unfinished)):
            # Launched through a code server, unlike the in-process runs of `kb ingest`, which
            # kb_pipeline.runs.fail_abandoned_runs looks after.
            if GRPC_INFO_TAG in run.tags:
                instance.report_run_failed(run, "kb up stopped while this run was in flight")
                log.warning("run %s was left unfinished by the last kb up: marked failed; the "
                            "sensor launches its files again", run.run_id)


def _unusable_port(ports: Mapping[str, int]) -> str | None:
    """Why one of these ports cannot be listened on, naming who holds it where that can be
    told; None when all are free."""
    if len(set(ports.values())) < len(ports):
        return f"{' and '.join(ports)} name the same port"
    for option, port in ports.items():
        with socket.socket() as probe:
            # As the servers bind: a connection of an earlier run in TIME_WAIT is no obstacle.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as error:
                return (f"cannot listen on 127.0.0.1:{port} ({option}): {error.strerror}"
                        f"{_port_holder(port)}")
    return None


def _port_holder(port: int) -> str:
    try:
        for conn in psutil.net_connections("tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
                command = " ".join(psutil.Process(conn.pid).cmdline())
                return f"; held by pid {conn.pid}: {command[:160]}"
    except psutil.Error:  # not allowed to look (another user's process, or macOS)
        pass
    return ""


def _lock_installation(home: Path) -> int | None:
    """Hold KB_HOME's kb-up.lock, or None when another `kb up` holds it: two would share one
    database and run two daemons over the same runs. The watchdog inherits the lock, so it is
    held until what a killed `kb up` left is stopped."""
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / "kb-up.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _lock_holder(home: Path) -> str:
    try:
        return (home / "kb-up.lock").read_text().strip() or "unknown"
    except OSError:
        return "unknown"
