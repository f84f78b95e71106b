"""Names and places every task derives from the config, so no handle or path crosses Prefect."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from schemas import ExperimentConfig


def experiment_dir(config: ExperimentConfig) -> Path:
    return config.experiment_dir.resolve()


def train_batch_size(config: ExperimentConfig) -> int:
    size = config.buffer.train_batch_size
    return size if size else config.buffer.batch_size * (config.algorithm.repeat_times or 1)


def read_json(path: Path, default: Any = None) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


def write_json_atomic(path: Path, data: Any) -> None:
    """Write-then-rename: a crash never leaves a half-written file that looks whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)
