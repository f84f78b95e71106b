"""scripts/passk_gap.py: the share of the pass@k − pass@1 gap a stage closes, from `rft eval --repeat k` outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "passk_gap.py"


def eval_output(path: Path, mean: float, best: float, temperature: float = 1.0) -> Path:
    """An `rft eval` output of 8 samples a problem, in the layout rft eval writes."""
    metrics = {"mean@8": mean, "pass@8": best, "format": 0.9, "truncated": 0.1, "response_length": 70.0}
    path.write_text(json.dumps({
        "model": f"checkpoints/rft/{path.stem}/huggingface", "minutes": 10.0,
        "eval": {"gsm8k-eval": metrics},
        "tasksets": {"gsm8k-eval": {"split": "test[:100]", "repeat_times": 8,
                                    "rollout_args": {"temperature": temperature}}},
    }))
    return path


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "out.json"), "--what", "a test", *args],
                          capture_output=True, text=True)


def test_the_gap_closed_is_the_gain_in_mean_over_the_starts_gap(tmp_path: Path) -> None:
    before = eval_output(tmp_path / "warmup.json", mean=0.2, best=0.6)
    after = eval_output(tmp_path / "grpo.json", mean=0.5, best=0.7)
    result = run(tmp_path, "--pair", f"{before}:{after}")
    assert result.returncode == 0, result.stderr
    pair = json.loads((tmp_path / "out.json").read_text())["pairs"][0]
    assert pair["gap_closed"] == 0.75  # (0.5 − 0.2) / (0.6 − 0.2)
    assert pair["before"]["model"] == "checkpoints/rft/warmup/huggingface"


def test_evaluations_at_different_temperatures_are_refused_by_name(tmp_path: Path) -> None:
    before = eval_output(tmp_path / "warmup.json", mean=0.2, best=0.6)
    after = eval_output(tmp_path / "grpo.json", mean=0.5, best=0.7, temperature=0.7)
    result = run(tmp_path, "--pair", f"{before}:{after}")
    assert result.returncode != 0
    assert "warmup.json and grpo.json differ in ['temperature']" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.json").exists()
