"""`kb up`: the whole product on one machine, on 127.0.0.1, until Ctrl-C."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kb_cli.dagster_home import prepare_dagster_home
from kb_core.database import stop_embedded
from kb_core.settings import REPO_ROOT, Settings

__all__ = ["run_up"]

log = logging.getLogger("kb.up")


def _bin(name: str) -> str:
    # The console scripts of this environment, not whatever else is on PATH.
    return str(Path(sys.executable).parent / name)


def run_up(settings: Settings, dagster_port: int, port: int) -> int:
    """Start database, migrations, Dagster webserver and daemon, query service; stop on Ctrl-C."""
    from kb_cli.main import prepare_database

    embedded = settings.database_url is None
    prepare_database(settings)
    prepare_dagster_home(settings)
    os.environ["KB_DOCS_DIRS"] = os.pathsep.join(str(d) for d in settings.docs_dirs)
    workspace = str(REPO_ROOT / "workspace.yaml")
    commands = {
        "dagster-webserver": [_bin("dagster-webserver"), "-h", "127.0.0.1",
                              "-p", str(dagster_port), "-w", workspace],
        "dagster-daemon": [_bin("dagster-daemon"), "run", "-w", workspace],
        "query-service": [_bin("kb"), "serve", "--host", "127.0.0.1", "--port", str(port)],
    }
    children: dict[str, subprocess.Popen] = {}
    try:
        for name, command in commands.items():
            children[name] = subprocess.Popen(command, cwd=REPO_ROOT, start_new_session=True)
            log.info("started %s (pid %d)", name, children[name].pid)
        log.info("Dagster UI: http://127.0.0.1:%d  query service: http://127.0.0.1:%d  "
                 "watching: %s", dagster_port, port, ", ".join(map(str, settings.docs_dirs)))
        log.info("the folder sensor ingests new and changed documents; Ctrl-C stops everything")
        while True:
            for name, child in children.items():
                if child.poll() is not None:
                    log.error("%s exited with status %s; stopping", name, child.returncode)
                    return 1
            time.sleep(1)
    except KeyboardInterrupt:
        log.info("stopping")
        return 0
    finally:
        _stop(children)
        if embedded:
            stop_embedded(settings)


def _stop(children: dict[str, subprocess.Popen]) -> None:
    """Stop each child's whole process group, killing what is left of it after 20 s: the
    Dagster code servers in them were seen to outlive SIGTERM and their parent."""
    for child in children.values():
        _signal_group(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for name, child in children.items():
        while _group_alive(child.pid) and time.monotonic() < deadline:
            child.poll()  # reap the leader, or its zombie keeps the group alive
            time.sleep(0.2)
        if _group_alive(child.pid):
            log.warning("%s did not stop in time; killing it", name)
            _signal_group(child.pid, signal.SIGKILL)
        child.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
