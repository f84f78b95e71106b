"""scripts/device-check.sh --dry-run: every check of the GPU device check runs, CPU against CPU, and passes; its JSON
is written whole. On a GPU machine the same script compares the device with CPU (docs/gpu.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_device_check_runs_every_check_on_cpu(tiny_model_path: str, tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    proc = subprocess.run([str(ROOT / "scripts/device-check.sh"), "--model", tiny_model_path, "--dry-run"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads((tmp_path / "device_check_dry_run.json").read_text())
    names = [c["name"] for c in report["checks"]]
    assert report["failed"] == 0 and report["passed"] == len(names)
    assert {"step/ppo/float32", "step/ppo/bfloat16", "lora/float32", "lora/bfloat16", "checkpoint", "export",
            "export/lora"} <= set(names)
    assert len([n for n in names if n.startswith("step/")]) == 2 * 9  # every loss that trains on samples, both dtypes
    assert f"{len(names)} passed, 0 failed" in proc.stdout
    # the trainer's core imports none of what the device machine lacks
    code = ("import sys; sys.path.insert(0, 'scripts'); import device_check; import backends.torch_trainer; "
            "print(sorted(m for m in ('ray', 'vllm', 'prefect', 'mlflow', 'verl') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True).stdout.strip() == "[]"


def test_the_gpu_smoke_checks_validate_for_a_two_gpu_node(tmp_path: Path) -> None:
    """scripts/gpu-smoke.sh --dry-run: each of its runs is a config `rft validate` accepts on 2 GPUs."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    proc = subprocess.run([str(ROOT / "scripts/gpu-smoke.sh"), "--dry-run", "--gpus", "2"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads((tmp_path / "gpu_smoke_dry_run.json").read_text())
    assert [c["check"] for c in report["checks"]] == ["torch/checkpoint", "torch/nccl", "verl/nccl"]
    assert all(c["rc"] == 0 and "cluster.gpu_per_node=2" in c["command"] for c in report["checks"])
    assert "3 passed, 0 failed" in proc.stdout
