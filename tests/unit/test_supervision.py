"""How `kb up` stops a child's process group (kb_cli/supervision.py), on real processes: one
that joins the group after its SIGTERM gets a SIGTERM of its own, and a group still running
at the end of the grace period is killed with its remaining processes named."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

from kb_cli.supervision import stop_groups

# On SIGTERM the leader starts a child in its own group, as a Dagster code server may start a
# run worker whose launch was under way, and waits for it.
SPAWNS_ON_SIGTERM = textwrap.dedent("""
    import signal, subprocess, sys, time
    def spawn(signum, frame):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        # 0 when the child ended by a SIGTERM
        sys.exit(0 if child.wait() == -signal.SIGTERM else 1)
    signal.signal(signal.SIGTERM, spawn)
    print("ready", flush=True)
    time.sleep(60)
""")

IGNORES_SIGTERM = textwrap.dedent("""
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    time.sleep(60)
""")


def _leader(script: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               text=True, start_new_session=True)
    assert process.stdout.readline() == "ready\n"
    return process


def test_a_process_that_joins_the_group_after_its_sigterm_is_stopped_too(caplog):
    leader = _leader(SPAWNS_ON_SIGTERM)
    caplog.set_level(logging.INFO, logger="kb.up")
    stop_groups({"spawner": leader.pid}, grace_s=30, reap=leader.poll)
    # The late child ended by its SIGTERM, and the leader with it, before the grace period's
    # kill.
    assert leader.wait(timeout=5) == 0
    assert "did not stop" not in caplog.text


def test_a_group_that_outlives_the_grace_period_is_killed_and_what_was_left_named(caplog):
    leader = _leader(IGNORES_SIGTERM)
    caplog.set_level(logging.INFO, logger="kb.up")
    stop_groups({"stubborn": leader.pid}, grace_s=1, reap=leader.poll)
    assert leader.wait(timeout=5) == -9
    assert f"stubborn did not stop in time; killing it (still running: {leader.pid} " \
           f"{sys.executable} -c" in caplog.text


def test_a_hurried_stop_kills_at_once(caplog):
    leader = _leader(IGNORES_SIGTERM)
    caplog.set_level(logging.INFO, logger="kb.up")
    stop_groups({"stubborn": leader.pid}, grace_s=60, hurry=lambda: True, reap=leader.poll)
    assert leader.wait(timeout=5) == -9
    assert "stubborn did not stop yet; killing it" in caplog.text
