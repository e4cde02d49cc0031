"""`kb backup PATH` and `kb restore PATH`: the embedded installation in one file, and back
(kb_core.backups; docs/backups.md)."""

from __future__ import annotations

import argparse
import sys

from kb_cli.output import emit
from kb_core.backups import BackupError, NotEmbedded, restore_backup, take_backup
from kb_core.settings import Settings

__all__ = ["backup", "restore"]


def backup(args: argparse.Namespace, settings: Settings) -> int:
    try:
        summary = take_backup(settings, args.path.resolve(), _steps(args))
    except BackupError as exc:
        print(f"kb backup: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, NotEmbedded) else 1
    manifest = summary["manifest"]
    emit(args, summary, lambda: print(
        f"{summary['path']}: {_size(summary['bytes'])} in {summary['seconds']:.1f} s "
        f"({manifest['counts']['documents']} documents, {manifest['counts']['query_log']} "
        f"questions; schema {manifest['schema']}). It holds every group's documents and "
        "employees' questions: keep it where only administrators can read it."))
    return 0


def restore(args: argparse.Namespace, settings: Settings) -> int:
    maps = {}
    for pair in args.map:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            print(f"kb restore: --map takes OLD=NEW, not {pair!r}", file=sys.stderr)
            return 2
        maps[old] = new
    try:
        summary = restore_backup(settings, args.path.resolve(), maps, _steps(args))
    except BackupError as exc:
        print(f"kb restore: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, NotEmbedded) else 1
    emit(args, summary, lambda: print(
        f"restored {summary['path']} (taken {summary['taken_at']}) into {settings.home} in "
        f"{summary['seconds']:.1f} s: {summary['counts']['documents']} documents, "
        f"{summary['counts']['api_tokens']} tokens, {summary['counts']['query_log']} questions "
        f"({summary['purged_queries']} past the {summary['retention_days']}-day retention "
        f"dropped); schema {summary['schema']}"
        + (f", migrated {', '.join(summary['migrated'])}" if summary["migrated"] else "")
        + ". Tokens revoked since the backup was taken are valid again: revoke them anew. "
        "Searches wait until the folder sensor has read the access rules (kb up)."))
    return 0


def _steps(args: argparse.Namespace):  # -> kb_core.backups.Step
    """Each step named on stderr when a person watches a terminal; nothing otherwise."""
    if args.json or not sys.stderr.isatty():
        return lambda _text: None
    return lambda text: print(f"… {text}", file=sys.stderr, flush=True)


def _size(size: int) -> str:
    return f"{size / 2**20:.1f} MB" if size >= 2**20 else f"{size / 1024:.0f} KB"
