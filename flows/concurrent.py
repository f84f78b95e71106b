"""Stage flows side by side: each call runs in its own thread, in a copy of the caller's context.

Prefect keeps the running flow (and settings such as the heartbeat switch of `stage_flows_without_
heartbeats`) in context variables, which a new thread does not inherit: copying the context makes
each stage flow a child of the calling flow run, as when it is called directly.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# Set while sides run side by side: one side's failure tells the others to stop waiting for it.
_STOP: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("rft_stop", default=None)


def run_concurrently(*calls: Callable[[], Any]) -> list[Any]:
    """Run every call at once; returns their results in order, or raises the first call's error."""
    if len(calls) == 1:
        return [calls[0]()]
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="stage-flow") as pool:
        futures = [pool.submit(contextvars.copy_context().run, call) for call in calls]
        return [future.result() for future in futures]


def side_by_side(*calls: Callable[[], Any]) -> list[Any]:
    """`run_concurrently`, and when one call fails the others' `stop_event()` is set, so a side
    waiting for the failed one stops at once instead of at its timeout."""
    stop = threading.Event()

    def guarded(call: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            try:
                return call()
            except BaseException:
                stop.set()
                raise

        return run

    token = _STOP.set(stop)
    try:
        return run_concurrently(*(guarded(call) for call in calls))
    finally:
        _STOP.reset(token)


def stop_event() -> threading.Event | None:
    """The running `side_by_side` group's stop signal (None outside one)."""
    return _STOP.get()
