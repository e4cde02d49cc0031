"""How much memory the embedded server sizes itself from
(kb_core.database_server.machine_memory): a container's cgroup limit when it is below the
physical memory, in either cgroup version."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kb_core.database_server import machine_memory

PHYSICAL = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize(("limit_file", "content", "expected"), [
    ("memory.max", f"{PHYSICAL // 4}\n", PHYSICAL // 4),  # cgroup v2, a smaller container
    ("memory.max", "max\n", PHYSICAL),  # v2, no limit
    ("memory/memory.limit_in_bytes", f"{PHYSICAL // 8}\n", PHYSICAL // 8),  # v1
    ("memory/memory.limit_in_bytes", "9223372036854771712\n", PHYSICAL),  # v1, no limit
    ("memory.max", f"{PHYSICAL * 2}\n", PHYSICAL),  # a limit above the machine's memory
], ids=["v2", "v2-unlimited", "v1", "v1-unlimited", "above-physical"])
def test_a_containers_limit_counts_when_below_the_physical_memory(tmp_path: Path, limit_file,
                                                                   content, expected):
    (tmp_path / limit_file).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / limit_file).write_text(content)
    assert machine_memory(tmp_path) == expected


def test_without_a_cgroup_the_physical_memory_counts(tmp_path: Path):
    assert machine_memory(tmp_path) == PHYSICAL
