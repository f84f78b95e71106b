"""Nothing is unpickled from disk: a checkpoint file that would run code when loaded is refused, naming
the file, by convert, by resume and by serve; our own checkpoints load with weights_only=True."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from checkpointing.merge import convert_step
from checkpointing.models import resolve_model_path
from checkpointing.safe_load import UnsafeCheckpointError, check_folder, load_tensors


class Payload:
    """Unpickling this runs `touch marker`: what a planted checkpoint file could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")


def plant(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model.norm.weight": torch.ones(4), "extra": Payload(marker)}, path)


def verl_step(step: Path, model_dir: Path, marker: Path) -> Path:
    """A veRL-shaped checkpoint (one FSDP rank) whose model shard carries the payload."""
    actor = step / "actor"
    hf = actor / "huggingface"
    hf.mkdir(parents=True)
    for item in model_dir.iterdir():
        if item.is_file() and item.suffix != ".safetensors":
            (hf / item.name).symlink_to(item.resolve())
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    plant(actor / "model_world_size_1_rank_0.pt", marker)
    return actor / "model_world_size_1_rank_0.pt"


def test_a_planted_pickle_is_refused_by_name(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    plant(tmp_path / "ckpt" / "optim_state.pt", marker)
    with pytest.raises(UnsafeCheckpointError, match="optim_state.pt.*posix.system"):
        check_folder(tmp_path / "ckpt")
    (tmp_path / "bare.pkl").write_bytes(__import__("pickle").dumps(Payload(marker)))
    with pytest.raises(UnsafeCheckpointError, match="bare.pkl"):
        load_tensors(tmp_path / "bare.pkl")
    assert not marker.exists()


def test_convert_refuses_a_planted_pickle(tmp_path: Path, model_dir: Path) -> None:
    marker = tmp_path / "ran"
    shard = verl_step(tmp_path / "exp" / "global_step_1", model_dir, marker)
    with pytest.raises(UnsafeCheckpointError, match=str(shard)):
        convert_step(tmp_path / "exp" / "global_step_1")
    assert not marker.exists()
    assert not (shard.parent / "huggingface" / "model.safetensors").exists()


def test_resume_loads_weights_only_and_refuses_a_planted_pickle(tmp_path: Path, model_dir: Path) -> None:
    import numpy as np

    from backends.torch_trainer import TorchTrainer
    from deployments import load_recipe

    config = load_recipe("smoke").with_overrides({"trainer.trainer_type": "torch"})
    trainer = TorchTrainer(config, model_dir, total_steps=2)
    trainer.save_checkpoint(tmp_path / "actor")
    optim = tmp_path / "actor" / "optim_state.pt"
    assert torch.serialization.get_unsafe_globals_in_checkpoint(optim) == []  # loads with plain weights_only
    expected = np.random.rand(3)
    np.random.rand(5)
    trainer.load_checkpoint(tmp_path / "actor")  # our own checkpoint resumes (RNG included)
    np.random.seed(None)
    trainer.load_checkpoint(tmp_path / "actor")
    assert np.allclose(np.random.rand(3), expected)

    marker = tmp_path / "ran"
    plant(optim, marker)
    with pytest.raises(UnsafeCheckpointError, match="optim_state.pt"):
        trainer.load_checkpoint(tmp_path / "actor")
    assert not marker.exists()


def test_serve_refuses_a_planted_pickle(tmp_path: Path, model_dir: Path) -> None:
    from prefect.testing.utilities import prefect_test_harness

    from deployments import load_recipe
    from flows.serve import serve

    root = tmp_path / "checkpoints"
    config = load_recipe("smoke").with_overrides({"mode": "serve", "checkpoint_root_dir": str(root), "name": "served",
                                                  "cluster.ray_address": "local"})
    exp = root / config.project / "served"
    marker = tmp_path / "ran"
    shard = verl_step(exp / "global_step_2", model_dir, marker)
    (exp / "latest_checkpointed_iteration.txt").write_text("2")
    with prefect_test_harness(server_startup_timeout=180):
        with pytest.raises(UnsafeCheckpointError, match=str(shard)):
            serve(config, max_seconds=1)
    assert not marker.exists()
