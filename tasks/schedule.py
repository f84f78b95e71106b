"""When the explorer and the trainer may go on, and how long either waits for the other.

Versions: version v is the weights after train step v (0: the initial model). Explore step k is
trained by train step k, which starts from version k-1, so its staleness is (k-1) - the version it
sampled with. With `sync_style: fixed` the explorer samples step k with exactly

    v(k) = sync_interval * floor((k - 1 - sync_offset) / sync_interval)   (0 while that is negative)

so staleness is at most sync_offset + sync_interval - 1, and exactly that in steady state; the trainer
publishes every sync_interval steps. `trainer_driven`: the trainer publishes every sync_interval steps
and the explorer takes the newest version at its next step. `explorer_driven`: every sync_interval
explore steps the explorer asks, and the trainer publishes after its next step. With a driven style
the explorer never runs more than `max_lead` versions ahead of the trainer (buffer capacity).
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


class SyncTimeoutError(TimeoutError):
    """One side waited `synchronizer.sync_timeout` seconds for the other."""


class OtherSideFailed(RuntimeError):
    """The other side of the run (explorer or trainer) failed; this one stops instead of waiting."""


def version_for_step(config: ExperimentConfig, step: int) -> int | None:
    """The weights version explore step `step` samples with (fixed style), or None: the newest."""
    sync = config.synchronizer
    if sync.sync_style != "fixed":
        return None
    return max(0, sync.sync_interval * ((step - 1 - sync.sync_offset) // sync.sync_interval))


def publish_due(config: ExperimentConfig, step: int, total_steps: int, requested: bool) -> bool:
    """Whether the trainer publishes its weights after train step `step` (`requested`: an explorer's
    request not yet answered, explorer_driven)."""
    sync = config.synchronizer
    if step == total_steps:
        return True  # the final model is what the explorer evaluates last
    if sync.sync_style == "explorer_driven":
        return requested
    if sync.sync_style in ("fixed", "trainer_driven"):  # every sync_interval steps
        return step % sync.sync_interval == 0
    raise ValueError(f"synchronizer.sync_style {sync.sync_style!r}: one of fixed, explorer_driven, trainer_driven")


def request_sync(config: ExperimentConfig, explore_step: int) -> None:
    """explorer_driven: the explorer asks for the trainer's newest weights after `explore_step`."""
    write_json_atomic(layout.sync_dir(experiment_dir(config)) / SYNC_REQUEST, {"after_explore_step": explore_step})


def latest_request(config: ExperimentConfig) -> int:
    """The explore step after which the explorer last asked for new weights (0: never)."""
    record = read_json(layout.sync_dir(experiment_dir(config)) / SYNC_REQUEST)
    return 0 if record is None else int(record["after_explore_step"])


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
