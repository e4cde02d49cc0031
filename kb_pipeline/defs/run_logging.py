# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""Where a run executed in-process (`kb ingest`, `kb generation rebuild`) sends its event log
lines: into Python's logging, as records of the `kb.dagster` logger, so that the `kb` command
decides where they go (its log file; the terminal only with -v) instead of Dagster's console
logger printing every event at DEBUG on stderr.

Runs launched by `kb up`'s daemon name no logger and keep Dagster's console logger, whose
output goes to the daemon's log file. Either way the event log in the instance is complete:
loggers only decide what is printed.
"""

import logging

import dagster as dg

__all__ = ["IN_PROCESS_LOGGING", "RUN_LOGGERS"]

EVENTS_LOGGER = "kb.dagster"


@dg.logger(description="Dagster's events as records of the Python logger `kb.dagster`.")
def python_logging(_init_context: dg.InitLoggerContext) -> logging.Logger:
    return logging.getLogger(EVENTS_LOGGER)


RUN_LOGGERS = {"python_logging": python_logging}

# The run config fragment that selects it.
IN_PROCESS_LOGGING = {"loggers": {"python_logging": {}}}
