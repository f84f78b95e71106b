"""Test modules in order of their measured seconds, longest first.

`scripts/test.sh` runs the tests on several pytest-xdist workers, a module to a worker at a time (`--dist loadfile`,
so a module's shared runs stay one run). Started longest first, the workers end near together, instead of one running
the last long module alone while the other waits. The seconds are a module's in the newest whole run (its default
and `full` tests) that benchmarks/suite_time.py measured: close enough for the default run too, where the long modules
are long as well. A module it does not list goes after the measured ones, in collection order.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

MEASURED = Path(__file__).resolve().parents[1] / "benchmarks" / "measured" / "suite_time_whole_2026-11-30_6ee961d.json"
# Modules newer than that run, each timed alone on 2026-12-06 (the development machine, beside other work): without
# them the longest new module would start last and end the run alone.
NEWER: dict[str, float] = {"test_learning_accuracy": 381.0, "test_model_matrix": 168.0, "test_model_matrix_verl": 108.0}


@cache
def module_seconds() -> dict[str, float]:
    """Seconds per test module (its file's stem) in the measured run; empty when the file is missing."""
    if not MEASURED.is_file():
        return {}
    per_file = json.loads(MEASURED.read_text())["per_file"]
    return {Path(path).stem: float(row["seconds"]) for path, row in per_file.items()}


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` with whole modules reordered, longest first; a module's own tests keep their order (a stable sort)."""
    seconds = NEWER | module_seconds()
    return sorted(items, key=lambda item: -seconds.get(item.path.stem, 0.0))
