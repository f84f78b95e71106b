"""Where the explorer and the trainer meet when they run apart (threads of one run, or deployments of
one experiment): the explorer's requests for weights (explorer_driven), the trainer's budget stop, and
waiting for the other side. What each side waits for is the schedule's answer (backends/schedule.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from checkpointing import layout
from checkpointing.layout import experiment_dir
from checkpointing.records import read_json, write_json_atomic
from schemas import ExperimentConfig

POLL_S = 0.1
SYNC_REQUEST = "sync_request.json"
BUDGET_STOP = "budget_stop.json"


class SyncTimeoutError(TimeoutError):
    """One side waited `synchronizer.sync_timeout` seconds for the other."""


class OtherSideFailed(RuntimeError):
    """The other side of the run (explorer or trainer) failed; this one stops instead of waiting."""


def request_sync(config: ExperimentConfig, explore_step: int) -> None:
    """explorer_driven: the explorer asks for the trainer's newest weights after `explore_step`."""
    write_json_atomic(layout.sync_dir(experiment_dir(config)) / SYNC_REQUEST, {"after_explore_step": explore_step})


def latest_request(config: ExperimentConfig) -> int:
    """The explore step after which the explorer last asked for new weights (0: never)."""
    record = read_json(layout.sync_dir(experiment_dir(config)) / SYNC_REQUEST)
    return 0 if record is None else int(record["after_explore_step"])


def announce_stop(config: ExperimentConfig, train_step: int, reason: str) -> None:
    """The trainer stopped at a budget after `train_step` (checkpointed): the explorer stops too."""
    write_json_atomic(layout.sync_dir(experiment_dir(config)) / BUDGET_STOP,
                      {"after_train_step": train_step, "reason": reason, "at": time.time()})


def stop_announced(config: ExperimentConfig, since: float) -> dict | None:
    """The trainer's budget stop announced at or after `since` (an explorer's start; an older one is a past
    attempt's, which the trainer has resumed from), or None."""
    record = read_json(layout.sync_dir(experiment_dir(config)) / BUDGET_STOP)
    return record if record is not None and record["at"] >= since else None


def wait_until(
    done: Callable[[], bool],
    *,
    timeout_s: float,
    waiting_for: str,
    other_side: Callable[[], str],
    stop: threading.Event | None = None,
) -> float:
    """Poll `done` until it holds; returns seconds waited. Raises SyncTimeoutError (naming what the
    other side last did) after `timeout_s`, or OtherSideFailed as soon as `stop` is set."""
    started = time.monotonic()
    while not done():
        if stop is not None and stop.is_set():
            raise OtherSideFailed(f"stopped waiting for {waiting_for}: the other side of the run failed")
        if time.monotonic() - started > timeout_s:
            raise SyncTimeoutError(
                f"waited {timeout_s:.0f} s (synchronizer.sync_timeout) for {waiting_for}; {other_side()}"
            )
        time.sleep(POLL_S)
    return time.monotonic() - started
