"""benchmarks/step_profile.py: the shares of a step's wall time, from a Ray timeline's actor calls."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from step_profile import profile, union_length  # noqa: E402

T0 = 1_800_000_000.0  # seconds since the epoch; Ray's timeline holds microseconds


def call(name: str, start: float, seconds: float) -> dict:
    """An actor call as Ray's timeline writes it: the method as its name, class and method as its category."""
    return {"ph": "X", "name": name.rsplit(".", 1)[-1], "cat": "task::" + name, "ts": (T0 + start) * 1e6, "dur": seconds * 1e6}


def test_overlapping_spans_count_once_and_are_clipped_to_the_window() -> None:
    assert union_length([(0, 4), (2, 6), (8, 9)], 1, 10) == pytest.approx(5 + 1)
    assert union_length([(0, 4)], 5, 10) == 0.0


def test_the_first_step_is_left_out_and_the_rest_split_into_parts() -> None:
    timeline = [
        call("VLLMEngine.generate", 0, 10),  # step 1 (the warm-up step): outside the window
        call("VLLMEngine.generate", 10.5, 6), call("TrainerActor.train_step", 16.5, 2),  # step 2: 10 → 20
        call("TrainerActor.publish_weights", 18.5, 0.5), call("VLLMEngine.load_weights", 18.5, 1),
        call("VLLMEngine.generate", 20, 8), call("TrainerActor.train_step", 24, 4),  # step 3: 20 → 30, overlapped
        {"ph": "i", "name": "VLLMEngine.generate", "ts": (T0 + 21) * 1e6},  # an instant: no span
        call("Reward.score_batch", 20, 10),  # a call of no part: orchestration's
    ]
    out = profile(timeline, [T0 + 10, T0 + 20, T0 + 30])
    assert out["window_s"] == 20 and out["steps_measured"] == 2
    two, three = out["per_step"]
    assert two == {"step": 2, "wall_s": 10, "sampling": 0.6, "training": 0.2, "sync": 0.1, "checkpoint": 0.0,
                   "orchestration": 0.1}
    assert three["sampling"] == 0.8 and three["training"] == 0.4 and three["orchestration"] == 0.2  # 28 → 30 idle
    assert out["shares"]["sampling"] == 0.7 and out["shares"]["orchestration"] == pytest.approx(0.15)
    with pytest.raises(ValueError, match="at least two steps"):
        profile(timeline, [T0 + 10])
