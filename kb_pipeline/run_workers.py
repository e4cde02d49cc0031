"""The ingest runs of `kb ingest` and `kb generation rebuild`, executed by worker processes as
many at a time as the Dagster instance lets its daemon launch (`concurrency: runs:`, two on
`kb up`'s instance), as the sensor's runs are. One process runs one run at a time, and left the
second core mostly idle (load ~1.0-1.5 on 2 cores). Runs that would go one at a time anyway (a
single run, or an instance that launches one at a time) are executed here: a worker would only
add its start (a new interpreter, Dagster and the job: seconds).

Each worker builds the ingest job and the instance once, tags its runs with its own process id,
so `fail_abandoned_runs` finds them if it dies, and dies with the command that started it. What
the stages report (kb_core.progress) and log in a worker comes back to this process over one
queue, so the live display and the log file follow the runs as they did when the runs ran here.
"""

from __future__ import annotations

import ctypes
import logging
import logging.handlers
import multiprocessing
import os
import queue
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass

import dagster as dg
from dagster._core.instance.ref import InstanceRef  # what get_ref returns; not exported

from kb_core.progress import listening, report
from kb_core.settings import Settings
from kb_pipeline.definitions import make_definitions
from kb_pipeline.defs.ingestion.jobs import INGEST_JOB
from kb_pipeline.defs.run_logging import EVENTS_LOGGER, IN_PROCESS_LOGGING
from kb_pipeline.runs import process_tags

__all__ = ["execute_runs"]

log = logging.getLogger(__name__)

_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({})))


def _concurrent_runs(instance: dg.DagsterInstance) -> int:
    """How many runs the instance's run queue launches at once (at least one)."""
    run_queue = instance.get_concurrency_config().run_queue_config
    limit = run_queue.max_concurrent_runs if run_queue else 1
    return limit if limit > 0 else os.cpu_count() or 1  # a negative limit means none


def execute_runs(settings: Settings, instance: dg.DagsterInstance,
                 tags: list[dict[str, str]]) -> list[tuple[str, bool]]:
    """Execute the ingest job once per entry of `tags` (each names a run's partition range),
    `_concurrent_runs` at a time; return each run's id and whether it succeeded, in the order of
    `tags`, when all have ended. A run that fails is recorded by Dagster as failed, as the
    sensor's would be; an error outside the runs is raised."""
    if not tags:
        return []
    workers = min(_concurrent_runs(instance), len(tags))
    if workers == 1:
        runner = _Runner(settings, instance)
        return [runner.run(run_tags) for run_tags in tags]
    context = multiprocessing.get_context("spawn")  # a fork would copy this process's pools
    messages = context.Queue()
    root = logging.getLogger()
    levels = {"": root.level, EVENTS_LOGGER: logging.getLogger(EVENTS_LOGGER).level}
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker,
        initargs=(settings, instance.get_ref(), messages, levels, os.getpid()),
    ) as pool:
        futures = [pool.submit(_run, run_tags) for run_tags in tags]
        pending, received, sent = set(futures), 0, 0
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            received += _relay(messages, block=False)
            sent += sum(future.result()[1] for future in done)
        # A worker's last messages may still be in its queue's pipe when its run has returned.
        while received < sent:
            if not (relayed := _relay(messages, block=True)):
                log.warning("%d messages of the run workers were lost", sent - received)
                break
            received += relayed
    return [future.result()[0] for future in futures]


class _Runner:
    """The ingest job on an instance, executed in this process."""

    def __init__(self, settings: Settings, instance: dg.DagsterInstance) -> None:
        self.job = make_definitions(settings).resolve_job_def(INGEST_JOB.name)
        self.instance = instance
        self.run_config = IN_PROCESS_LOGGING

    def run(self, tags: dict[str, str]) -> tuple[str, bool]:
        result = self.job.execute_in_process(
            instance=self.instance, tags={**tags, **process_tags()},
            run_config=self.run_config, raise_on_error=False)
        return result.run_id, result.success


def _relay(messages: multiprocessing.Queue, block: bool) -> int:
    """Pass the workers' messages on, as if made here; return how many. With `block`, wait
    for at least one (5 s at most)."""
    count = 0
    while True:
        try:
            message = messages.get(block=block and count == 0, timeout=5.0)
        except queue.Empty:
            return count
        count += 1
        if isinstance(message, logging.LogRecord):
            logging.getLogger(message.name).handle(message)
        else:
            report(*message)


@dataclass
class _Messages:
    """What a worker sends to the parent (log records, progress reports), counted."""

    queue: multiprocessing.Queue
    sent: int = 0
    accounted: int = 0  # of `sent`, what the runs executed so far returned

    def send(self, message: object) -> None:
        self.queue.put(message)
        self.sent += 1

    def since_accounted(self) -> int:
        count, self.accounted = self.sent - self.accounted, self.sent
        return count


# A worker's own: set by the pool's initializer.
_messages: _Messages | None = None
_runner: _Runner | None = None


def _start_worker(settings: Settings, ref: InstanceRef, messages: multiprocessing.Queue,
                  levels: dict[str, int], parent: int) -> None:
    global _messages, _runner
    _end_with(parent)
    _messages = _Messages(messages)
    logging.getLogger().handlers[:] = [_Forward(_messages)]
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    logging.captureWarnings(True)
    _runner = _Runner(settings, dg.DagsterInstance.from_ref(ref))


def _end_with(parent: int) -> None:
    """End this worker when the command that started it ends, however it ends, as its runs
    ended when they ran in the command's own process: its run is then abandoned, and
    `fail_abandoned_runs` marks it failed. Left alone, a worker went on with its run for
    minutes, and a SIGTERM waits for Dagster's handler, which lets the run go on (Linux only)."""
    if sys.platform != "linux":
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before the line above
        os.kill(os.getpid(), signal.SIGKILL)


class _Forward(logging.handlers.QueueHandler):
    """A log record, made picklable (message formatted, traceback as text), sent to the
    parent."""

    def __init__(self, messages: _Messages) -> None:
        super().__init__(messages.queue)
        self.messages = messages

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        # Only what every record holds: Dagster's records carry their event as an extra.
        prepared = super().prepare(record)
        return logging.makeLogRecord(
            {k: v for k, v in vars(prepared).items() if k in _RECORD_ATTRIBUTES})

    def enqueue(self, record: logging.LogRecord) -> None:
        self.messages.send(record)


def _run(tags: dict[str, str]) -> tuple[tuple[str, bool], int]:
    """Execute one run; return its id and success, and how many messages the worker sent since
    its last run returned (its start's log records too), so the parent knows how many to wait
    for."""
    messages, runner = _messages, _runner
    assert messages is not None and runner is not None, "the pool initializer starts it"
    with listening(lambda event, uri, count: messages.send((event, uri, count))):
        result = runner.run(tags)
    return result, messages.since_accounted()
