"""`kb ingest PATH...`: files and folders through the same asset graph the sensor uses."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from kb_cli.logs import LOG_FILE
from kb_cli.output import emit
from kb_cli.progress_display import live_display
from kb_core.embeddings.pool import EmbeddingPoolError
from kb_core.index_model import IndexModelMismatchError
from kb_core.migrations import prepare_database
from kb_core.settings import Settings
from kb_pipeline.dagster_home import dagster_instance
from kb_pipeline.in_process import IngestSummary, ingest_paths

__all__ = ["run"]

# A summary lists this many failures; `kb failures` lists them all.
_FIRST_ERRORS = 5


def run(args: argparse.Namespace, settings: Settings) -> int:
    settings = prepare_database(settings)
    with dagster_instance(settings) as instance, live_display(args) as display:
        try:
            summary = ingest_paths([Path(p) for p in args.paths], args.groups, settings, instance)
        except (IndexModelMismatchError, EmbeddingPoolError) as exc:
            print(f"kb ingest: {exc}", file=sys.stderr)
            return 2
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    log = settings.log_dir / LOG_FILE
    emit(args, summary, lambda: Console().print(_summary(summary, display.elapsed_s, log)))
    return 1 if summary.failed else 0


def _summary(summary: IngestSummary, elapsed_s: float, log: Path) -> Group:
    """The short table a person reads at the end: counts, the first errors, the time."""
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for label, value in (("ingested", summary.ingested), ("unchanged", summary.skipped),
                         ("no text found", len(summary.without_text)),
                         ("waiting for OCR", len(summary.waiting_for_ocr)),
                         ("deleted", summary.deleted), ("failed", len(summary.failed)),
                         ("chunks", summary.chunks), ("time", f"{elapsed_s:.1f} s")):
        if value or label not in ("no text found", "waiting for OCR"):
            table.add_row(label, str(value), style="red" if label == "failed" and value else None)
    for blank in summary.without_text[:_FIRST_ERRORS]:
        table.add_row("", f"{Path(blank.source_uri).name}: {blank.error}", style="yellow")
    for failure in summary.failed[:_FIRST_ERRORS]:
        table.add_row("", f"{Path(failure.source_uri).name}: {failure.error}", style="red")
    if len(summary.failed) > _FIRST_ERRORS:
        table.add_row("", f"… {len(summary.failed) - _FIRST_ERRORS} more: kb failures")
    return Group(Text(f"kb ingest: {summary.documents} documents", style="bold"), table,
                 Text(f"log: {log}", style="dim"))
