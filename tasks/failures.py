"""Failures: only those a retry can fix are retried, and a wrong setting is reported once, by name.

`transient_only` is the `retry_condition_fn` of every task that retries: a died engine or trainer, a
reset connection or a timeout is retried (after the policy revives what died); a `ConfigError`, a
missing file or a malformed line fails at once.

`report_config_errors_briefly` keeps Prefect from printing a traceback for a ConfigError at every
level (task, each enclosing flow): the message names the field or the file, the stack adds nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from backends.errors import ConfigError, is_transient

PREFECT_RUN_LOGGERS = ("prefect.task_runs", "prefect.flow_runs")


def transient_only(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect retry condition: retry when the failure is transient (backends.errors.is_transient)."""
    error = state.data  # Prefect hands the raised exception over as the Failed state's data
    return isinstance(error, BaseException) and is_transient(error)


class _BriefConfigErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, ConfigError):
            record.exc_info = None
            record.exc_text = None
        return True


def report_config_errors_briefly() -> None:
    """Prefect's run loggers log a ConfigError as its message, without the traceback (idempotent)."""
    for name in PREFECT_RUN_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(f, _BriefConfigErrors) for f in log.filters):
            log.addFilter(_BriefConfigErrors())
