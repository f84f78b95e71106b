"""The tally of revived engines and trainers ({experiment_dir}/log/restarts.json), logged with every
step's metrics as `engine_restarts` / `trainer_restarts` whatever the monitor."""

from __future__ import annotations

import threading

from checkpointing import layout
from checkpointing.layout import experiment_dir
from checkpointing.records import read_json, write_json_atomic
from schemas import ExperimentConfig

RESTARTS = "restarts.json"
_lock = threading.Lock()  # the explorer and trainer threads of one run may both count


def count_restart(config: ExperimentConfig, part: str, count: int = 1) -> dict[str, float]:
    """Add `count` restarts of `part` ("engine" or "trainer") to the experiment's tally; returns the tally."""
    path = layout.log_dir(experiment_dir(config)) / RESTARTS
    with _lock:
        tally = restart_counts(config)
        tally[f"{part}_restarts"] = tally.get(f"{part}_restarts", 0.0) + count
        write_json_atomic(path, tally)
    return tally


def restart_counts(config: ExperimentConfig) -> dict[str, float]:
    saved = read_json(layout.log_dir(experiment_dir(config)) / RESTARTS, {})
    return {"engine_restarts": 0.0, "trainer_restarts": 0.0, **saved}
