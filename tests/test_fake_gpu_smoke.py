"""`rft run smoke` against Ray nodes that declare GPUs (issue 70). RFT_PLACEHOLDER_GPUS=1 keeps every device CPU while
Ray places by GPU (backends.local.capacity.gpus_compute): what runs is the plan, the bounded starts, the placement
and a whole run through them.

- veRL on 4 GPUs, placed as gsm8k-qwen is: one engine takes a GPU, veRL's workers the other three, one group;
- mode colocate on 1 GPU: the engine and the torch trainer on half of it each, taking turns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _smoke_on(gpus: int, tmp_path: Path, settings: dict[str, str]) -> str:
    """`rft run smoke` with `settings` on a Ray node declaring `gpus` GPUs; its output."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 6, "num_gpus": gpus})
    try:
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"PREFECT_HOME": str(tmp_path / "prefect")}
        settings = {"checkpoint_root_dir": str(tmp_path / "checkpoints"), "cluster.ray_address": cluster.address, **settings}
        proc = subprocess.run(
            [sys.executable, "-m", "cli.main", "run", "smoke", *[a for k, v in settings.items() for a in ("--set", f"{k}={v}")]],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
        )
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-6000:]
        return output
    finally:
        cluster.shutdown()


@pytest.fixture
def placeholder_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RFT_PLACEHOLDER_GPUS", "1")  # the node's processes inherit it
    monkeypatch.setenv("RAY_TMPDIR", tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # short: Ray's socket paths


@pytest.mark.slow
def test_smoke_on_verl_completes_on_a_node_declaring_4_gpus(tmp_path: Path, tiny_model_path: str,
                                                            placeholder_gpus: None) -> None:
    output = _smoke_on(4, tmp_path, {
        "name": "fake-gpus", "trainer.trainer_type": "verl", "model.model_path": tiny_model_path,
        "synchronizer.sync_method": "nccl",  # the GPU default: a push into the engine (over gloo on CPU devices)
    })
    assert "1 vLLM engine(s), 1 GPU(s)" in output and "trainer verl with 3 GPU(s)" in output, output[-6000:]
    states = list((tmp_path / "checkpoints").rglob("rft_verl_state.json"))  # one a checkpoint
    assert states and {json.loads(s.read_text())["world_size"] for s in states} == {3}  # the three GPUs the engine left


@pytest.mark.slow
def test_smoke_colocated_completes_on_a_node_declaring_1_gpu(tmp_path: Path, tiny_model_path: str,
                                                             placeholder_gpus: None) -> None:
    output = _smoke_on(1, tmp_path, {
        "name": "fake-gpu", "mode": "colocate", "cluster.gpu_per_node": "1", "cluster.node_num": "1",
        "model.model_path": tiny_model_path, "synchronizer.sync_method": "memory",
    })
    assert "0.5 GPU(s)" in output and "engine and trainer share one GPU, taking turns" in output, output[-6000:]
