"""Stage flows side by side: each call runs in its own thread, in a copy of the caller's context.

Prefect keeps the running flow (and settings such as the heartbeat switch of `stage_flows_without_
heartbeats`) in context variables, which a new thread does not inherit: copying the context makes
each stage flow a child of the calling flow run, as when it is called directly.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def run_concurrently(*calls: Callable[[], Any]) -> list[Any]:
    """Run every call at once; returns their results in order, or raises the first call's error."""
    if len(calls) == 1:
        return [calls[0]()]
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="stage-flow") as pool:
        futures = [pool.submit(contextvars.copy_context().run, call) for call in calls]
        return [future.result() for future in futures]
