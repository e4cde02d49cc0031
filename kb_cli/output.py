"""What every `kb` command shares: results on stdout (one JSON object with --json), and the one
parser of a `--groups` list."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import msgspec

__all__ = ["emit", "groups"]


def groups(value: str) -> tuple[str, ...]:
    """`--groups hr,managers` as a tuple; at least one group."""
    parsed = tuple(g.strip() for g in value.split(",") if g.strip())
    if not parsed:
        raise argparse.ArgumentTypeError("give at least one group, e.g. --groups hr,managers")
    return parsed


def emit(args: argparse.Namespace, payload: object, human: Callable[[], None]) -> None:
    """`payload` as one JSON line with --json, else what `human` prints."""
    if args.json:
        sys.stdout.write(msgspec.json.encode(payload).decode() + "\n")
    else:
        human()
