"""`kb up --stop-with-parent` (kb_cli/parent_watch.py) under a real GNU make, with a stand-in
for `kb up` that make runs as `make up` runs it (`exec` in a recipe that needs a shell): every
stop signal sent to make alone reaches it once, whether make passes it on (SIGTERM) or not
(SIGINT, SIGHUP), a signal to make's whole process group (Ctrl-C) is counted once too, and a
killed make stops it as SIGTERM would."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from kb_cli.parent_watch import PASSED_ON_S

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("make") is None,
    reason="make's dying is seen in /proc; needs make")

# As `kb up` answers stop signals: counts them, and stops when one came. It tells how many
# once the watch has ended, and with it any signal the watch would send.
STAND_IN = textwrap.dedent("""
    import logging, sys, time
    from kb_cli.parent_watch import Parent
    from kb_cli.supervision import STOP_SIGNALS, StopSignals
    log, passed_on_s = sys.argv[1], float(sys.argv[2])
    logging.basicConfig(level=logging.INFO, filename=log, format="%(message)s")
    signals = StopSignals()
    watch = Parent.now().watch(STOP_SIGNALS, stopping=lambda: signals.count > 0,
                               passed_on_s=passed_on_s)
    logging.info("ready")
    while not signals.count:
        time.sleep(0.05)
    watch.join()
    time.sleep(0.3)
    logging.info("stop signals: %d", signals.count)
""")


class Make:
    """`make up` in a session of its own, its recipe the stand-in."""

    def __init__(self, make: subprocess.Popen, stand_in: psutil.Process, log: Path) -> None:
        self.make, self.stand_in, self.log = make, stand_in, log

    def stand_in_output(self) -> str:
        """What the stand-in logged, once it has ended."""
        deadline = time.monotonic() + 15
        while _running(self.stand_in):
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.05)
        return self.log.read_text()


def _running(process: psutil.Process) -> bool:
    # Orphaned when make is killed, it may stay a zombie a while: its reaper is not ours.
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextmanager
def make_up(tmp_path: Path, passed_on_s: float = 0.5) -> Iterator[Make]:
    log = tmp_path / "stand-in.log"
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    (tmp_path / "Makefile").write_text(
        f'up:\n\texec "{sys.executable}" stand_in.py "{log}" {passed_on_s}\n')
    make = subprocess.Popen(["make", "-s", "up"], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not (log.exists() and "ready" in log.read_text()):
            assert time.monotonic() < deadline and make.poll() is None
            time.sleep(0.05)
        [stand_in] = psutil.Process(make.pid).children()
        yield Make(make, stand_in, log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGKILL)
        make.wait()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_a_signal_make_does_not_pass_on_stops_its_recipe_once_and_make_then_dies_of_it(
        tmp_path, sig):
    with make_up(tmp_path) as up:
        up.make.send_signal(sig)
        output = up.stand_in_output()
        assert f"is ending on {sig.name} without passing it on" in output
        assert f"{sig.name}: stopping" in output
        assert "stop signals: 1" in output
        assert up.make.wait(timeout=5) == -sig


def test_the_sigterm_make_passes_on_is_counted_once(tmp_path):
    with make_up(tmp_path, passed_on_s=PASSED_ON_S) as up:
        up.make.send_signal(signal.SIGTERM)
        output = up.stand_in_output()
        assert "without passing it on" not in output
        assert "stop signals: 1" in output
        assert up.make.wait(timeout=5) == -signal.SIGTERM


def test_ctrl_c_to_makes_process_group_is_counted_once(tmp_path):
    with make_up(tmp_path, passed_on_s=PASSED_ON_S) as up:
        os.killpg(up.make.pid, signal.SIGINT)
        output = up.stand_in_output()
        assert "without passing it on" not in output
        assert "stop signals: 1" in output


def test_a_killed_make_stops_its_recipe_as_sigterm_would(tmp_path):
    with make_up(tmp_path) as up:
        up.make.kill()
        output = up.stand_in_output()
        assert f"the parent process (pid {up.make.pid}) ended: stopping as on SIGTERM" in output
        assert "SIGTERM: stopping" in output
        assert "stop signals: 1" in output
