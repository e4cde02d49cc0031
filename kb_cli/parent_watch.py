"""`kb up --stop-with-parent`: stop everything when the parent process stops, for a parent
that does not pass a stop signal on to `kb up`. GNU make is one, and `make up` uses the option.

What GNU make (4.3, as tried) does when SIGINT, SIGTERM or SIGHUP is sent to it alone (its
pid, not its process group): it restores the signal's default action, blocks it, passes on
SIGTERM (and only SIGTERM) to the process running its recipe, waits for that process to end,
and only then dies of the signal. SIGINT and SIGHUP it takes for a terminal's, which reached
the whole process group. So make never dies first, and a parent-death signal (prctl
PR_SET_PDEATHSIG) would not tell `kb up` anything: make would wait for ever. What `kb up` can
see is the parent's signal dispositions in /proc/<pid>/status: a stop signal that the parent
handled when `kb up` started and no longer handles means that its handler restored the default
action to die of it, the usual ending of a program's handler for a fatal signal, not make's
alone. (Where there is no /proc, only the parent's death is seen.) A make that started with
SIGINT ignored (`make up &` in a script) ignores it for good, and shows nothing.

Opt-in, because `kb up &` or `nohup kb up` from an interactive shell must outlive the shell.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PASSED_ON_S", "Parent", "ParentAtStart"]

log = logging.getLogger("kb.up")

_POLL_S = 0.5

# Once the parent is seen stopping, how long `kb up` waits for a stop signal of its own
# before it signals itself: the parent may pass the signal on (make does SIGTERM), or a
# terminal may have signalled both (Ctrl-C), and a second signal would hurry the stop.
PASSED_ON_S = 2.0


@dataclass(frozen=True)
class Parent:
    """The parent process as it was when `kb up` started."""

    pid: int
    handled: int  # the signals it handled, as a mask of /proc/<pid>/status; 0 where unknown

    @classmethod
    def now(cls) -> Parent:
        pid = os.getppid()
        dispositions = _dispositions(pid)
        return cls(pid, dispositions[0] if dispositions else 0)

    def watch(self, signals: Iterable[signal.Signals], stopping: Callable[[], bool],
              passed_on_s: float = PASSED_ON_S) -> threading.Thread:
        """Signal this process, in a thread of its own, with the stop signal among `signals`
        that the parent dies of (SIGTERM when it has died), unless `stopping()` turns true
        within `passed_on_s`. The thread ends then, or as soon as `stopping()` is true."""
        thread = threading.Thread(target=self._watch, name="parent-watch", daemon=True,
                                  args=(tuple(signals), stopping, passed_on_s))
        thread.start()
        return thread

    def _watch(self, signals: tuple[signal.Signals, ...], stopping: Callable[[], bool],
               passed_on_s: float) -> None:
        while not stopping():
            if (stop := self._stopping_on(signals)) is not None:
                signum, why = stop
                deadline = time.monotonic() + passed_on_s
                while time.monotonic() < deadline:
                    if stopping():
                        return
                    time.sleep(0.1)
                log.info("%s: stopping as on %s", why, signum.name)
                os.kill(os.getpid(), signum)
                return
            time.sleep(_POLL_S)

    def _stopping_on(self, signals: Sequence[signal.Signals]
                     ) -> tuple[signal.Signals, str] | None:
        # A process whose parent died is re-parented for good: no pid reuse can hide it.
        if os.getppid() != self.pid:
            return signal.SIGTERM, f"the parent process (pid {self.pid}) ended"
        if (dispositions := _dispositions(self.pid)) is None:
            return None
        handled, ignored = dispositions
        for signum in signals:
            bit = 1 << (signum - 1)
            if self.handled & bit and not (handled | ignored) & bit:
                return signum, (f"the parent process (pid {self.pid}) is ending on "
                                f"{signum.name} without passing it on")
        return None


def _dispositions(pid: int) -> tuple[int, int] | None:
    """The signals a process handles and those it ignores, as masks; None where /proc cannot
    tell (not Linux, or the process has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    try:
        return int(fields["SigCgt"], 16), int(fields["SigIgn"], 16)
    except (KeyError, ValueError):
        return None


class ParentAtStart(argparse.Action):
    """A flag whose value is the Parent as it was when the command line was parsed: before
    `kb up` imports Dagster (over a second), so that a signal the parent gets meanwhile still
    shows as a change."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=None, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, Parent.now())
