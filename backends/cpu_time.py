"""CPU seconds a process has used since it started, its child processes included: what an engine actor, a
trainer actor or a trainer's worker process reports of itself (tracking/usage.py keeps each step's share)."""

from __future__ import annotations

from typing import Any

import psutil


def process_tree_cpu_s() -> float:
    """User + system seconds of this process, of its live descendants (vLLM's engine-core process on a GPU)
    and of the children that ended and were waited for. A process that ends takes its count along unless
    its parent waited for it, so the count may only lag, never double."""
    me = psutil.Process()
    total = _seconds(me.cpu_times())
    for child in me.children(recursive=True):
        try:
            total += _seconds(child.cpu_times())
        except psutil.Error:  # it ended meanwhile
            pass
    return total


def _seconds(times: Any) -> float:  # psutil's pcputimes
    return times.user + times.system + times.children_user + times.children_system
