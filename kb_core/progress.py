"""Progress of long work as it happens, for a display to follow: the ingestion stages announce
each document they finish and each batch of passages they embed, the evaluation each question
it puts. Nothing listens unless a process subscribes (`kb ingest` on a terminal), and a report
costs a loop over no listeners; the work never waits for a display.

A listener is a plain callable, called in the thread that does the work (Dagster's in-process
executor runs the stages in the caller's thread, but nothing here depends on it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

__all__ = ["Event", "Listener", "listening", "report"]

Event = Literal[
    "files",      # count: files an ingest or a rebuild round looks at (the total)
    "unchanged",  # count: files that need no work
    "deleted",    # count: files that left the index
    "parsing",    # uri: the file being parsed now
    "parsed",     # uri
    "chunked",    # uri, count: its passages
    "to_embed",   # count: passages of a run that the model has not embedded before
    "embedded",   # count: passages just embedded
    "indexed",    # uri
    "waiting",    # uri: a scan whose pages wait for OCR
    "to_read",    # count: pages the OCR step will read (the total)
    "page_read",  # uri: one page read by OCR
    "failed",     # uri
    "skipped",    # uri: nothing to index in it (a scan where OCR found no text)
    "questions",  # count: questions (times modes) an evaluation will put
    "question",   # one of them answered
]
Listener = Callable[[Event, str | None, int], None]

_listeners: list[Listener] = []


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Call `listener` with every report made while the block runs."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


def report(event: Event, uri: str | None = None, count: int = 1) -> None:
    """Tell the listeners, if any, that `event` happened (to `uri`, `count` times)."""
    for listener in tuple(_listeners):
        listener(event, uri, count)
