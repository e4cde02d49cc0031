"""The live display of long work on a terminal (`kb ingest`, `kb generation rebuild`,
`kb eval`): files done of the total, passages embedded and their rate, questions put, the
current file, elapsed time and ETA, redrawn on stderr from what the work reports
(kb_core.progress). Without a terminal, or with --json, there is no display at all: stdout keeps
exactly the result and stderr only warnings and errors."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from kb_core import progress

__all__ = ["WorkDisplay", "live_display"]

# The bar each event adds to the total of, or advances.
_TOTALS = {"files": "files", "to_read": "pages", "to_embed": "passages",
           "questions": "questions"}
_DONE = {"unchanged": "files", "indexed": "files", "failed": "files", "skipped": "files",
         "page_read": "pages", "embedded": "passages", "question": "questions"}
# Runs finish files in batches (a run parses all its files, then embeds, then indexes), so
# the rate behind the ETA is averaged over minutes, not rich's default 30 s.
_RATE_WINDOW_S = 600.0


class _Rate(ProgressColumn):
    """Items a second, over the task's recent history."""

    def render(self, task: Task) -> Text:
        unit = task.fields.get("unit", "")
        speed = task.finished_speed or task.speed
        return Text(f"{speed:.1f} {unit}/s" if speed else "", style="cyan")


class WorkDisplay:
    """Counts what the work reports, draws it while it runs, and times it."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.counts: dict[str, int] = {}
        self.current = ""
        self._bars = Progress(
            TextColumn("{task.description:>9}"), BarColumn(), MofNCompleteColumn(), _Rate(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            speed_estimate_period=_RATE_WINDOW_S,
        )
        self._tasks: dict[str, TaskID] = {}

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, event: progress.Event, uri: str | None, count: int) -> None:
        self.counts[event] = self.counts.get(event, 0) + count
        if uri is not None:
            self.current = f"{event} {Path(uri).name}"
        elif event == "to_embed" and count:
            self.current = f"embedding {count} new passages"
        if event in _TOTALS:
            self._grow(_TOTALS[event], count)
        elif event in _DONE:
            self._advance(_DONE[event], count)

    def _grow(self, name: str, count: int) -> None:
        if name not in self._tasks and not count:
            return  # nothing to do (every passage came from the cache): no empty bar
        if name not in self._tasks:
            self._tasks[name] = self._bars.add_task(name, total=0, unit=name)
        task = self._tasks[name]
        self._bars.update(task, total=self._bars.tasks[task].total + count)

    def _advance(self, name: str, count: int) -> None:
        if name in self._tasks:
            self._bars.advance(self._tasks[name], count)

    def _status(self) -> Text:
        shown = [(label, self.counts.get(event, 0)) for label, event in (
            ("unchanged", "unchanged"), ("parsed", "parsed"), ("passages", "chunked"),
            ("waiting for OCR", "waiting"), ("pages read", "page_read"), ("indexed", "indexed"),
            ("failed", "failed"), ("deleted", "deleted"))]
        line = " · ".join(f"{label} {n}" for label, n in shown if n)
        now = f"  {self.current}" if self.current and not self._bars.finished else ""
        return Text(f"{line}{now}", style="dim", overflow="ellipsis", no_wrap=True)

    def __rich__(self) -> Group:
        return Group(self._bars, self._status())


@contextmanager
def _terminal() -> Iterator[Console | None]:
    """A console on the terminal stderr is, if it is one. Dagster captures a step's output by
    pointing descriptors 1 and 2 at files (its compute logs), which froze a display drawn on
    descriptor 2 for as long as a step ran: this console writes to a copy of the descriptor,
    which that leaves alone."""
    if not sys.stderr.isatty():
        yield None
        return
    with os.fdopen(os.dup(sys.stderr.fileno()), "w", encoding="utf-8") as terminal:
        yield Console(file=terminal)


@contextmanager
def live_display(args: argparse.Namespace) -> Iterator[WorkDisplay]:
    """A WorkDisplay following the work done in the block; drawn on stderr when it is a
    terminal and --json was not given, else only counting. Log lines written meanwhile are
    printed above the display."""
    display = WorkDisplay()
    with ExitStack() as stack:
        console = None if args.json else stack.enter_context(_terminal())
        if console is not None:
            stack.enter_context(Live(display, console=console, refresh_per_second=4,
                                     redirect_stderr=True, redirect_stdout=False))
        stack.enter_context(progress.listening(display))
        yield display
