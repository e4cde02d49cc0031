"""Running a command with the outside network blocked: a fresh network namespace holding only
a loopback interface (Unix sockets, and so the embedded database, still work)."""

from __future__ import annotations

import os
import shutil

import pytest

__all__ = ["offline"]


def offline(command: list[str]) -> list[str]:
    """`command` wrapped so that it runs with no route to any outside host."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("blocking the network needs root, unshare and ip (CI runs as root)")
    return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *command]
