"""Where a running `kb up` serves: written to `$KB_HOME/kb-up.json` once its servers start and
removed when it stops, so that `kb status` can name (and ask) the service of the installation."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

__all__ = ["Addresses", "forget_addresses", "read_addresses", "record_addresses"]

_FILE = "kb-up.json"


Addresses = dict[str, str]  # "dagster" and "service": their base URLs


def record_addresses(home: Path, addresses: Addresses) -> None:
    (home / _FILE).write_text(json.dumps(addresses) + "\n", encoding="utf-8")


def forget_addresses(home: Path) -> None:
    (home / _FILE).unlink(missing_ok=True)


def read_addresses(home: Path) -> Addresses | None:
    """What the last `kb up` recorded, if it did not stop (it may have been killed)."""
    with contextlib.suppress(OSError, ValueError):
        return json.loads((home / _FILE).read_text(encoding="utf-8"))
    return None
