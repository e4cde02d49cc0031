"""`kb ingest PATH...`: files and folders through the same asset graph the sensor uses."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kb_cli.dagster_home import dagster_instance
from kb_cli.database import prepare_database
from kb_cli.output import emit
from kb_core.index_model import IndexModelMismatchError
from kb_core.settings import Settings
from kb_pipeline.in_process import ingest_paths

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    settings = prepare_database(settings)
    with dagster_instance(settings) as instance:
        try:
            summary = ingest_paths([Path(p) for p in args.paths], args.groups, settings, instance)
        except IndexModelMismatchError as exc:
            print(f"kb ingest: {exc}", file=sys.stderr)
            return 2
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)

    def human() -> None:
        print(f"{summary.documents} documents: {summary.ingested} ingested "
              f"({summary.chunks} chunks), {summary.skipped} unchanged, "
              f"{summary.deleted} deleted, {len(summary.failed)} failed")
        for failure in summary.failed:
            print(f"  FAILED {failure.source_uri}: {failure.error}")

    emit(args, summary, human)
    return 1 if summary.failed else 0
