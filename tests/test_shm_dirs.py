"""Two experiments of one project/name from two checkpoint roots on one machine (the nightly deployment
beside a run by hand) keep their RAM-backed folders apart: the staging folder the trainer exports into, the
engines' serve folders, and what each frees at its release."""

from __future__ import annotations

from pathlib import Path

from backends.local.policy import LocalPolicy
from backends.local.vllm_engine import EngineSettings
from backends.local.weight_sync import make_transport, remove_shared_memory
from deployments import load_recipe


def test_same_named_experiments_in_two_roots_share_no_shared_memory(tmp_path: Path) -> None:
    a, b = (LocalPolicy(load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path / root)}))
            for root in ("one", "two"))
    assert a.experiment == b.experiment  # the same actor names, each in its own Ray
    memory = make_transport("memory", use_gpu=False)
    staging = [memory.export_dir(p.config.experiment_dir.resolve(), p.experiment, 1) for p in (a, b)]
    serve = [Path(p._in_shm(EngineSettings(model_path="m", max_model_len=8)).shm_dir) / p.engine_names[0] for p in (a, b)]
    assert staging[0] != staging[1] and serve[0] != serve[1]
    try:
        for folder in (*staging, *serve):
            folder.mkdir(parents=True)
            (folder / "model.safetensors").write_bytes(b"weights")
        remove_shared_memory(a.config.experiment_dir, a.experiment)  # a's release
        assert not staging[0].exists() and not serve[0].exists()
        assert (staging[1] / "model.safetensors").is_file() and (serve[1] / "model.safetensors").is_file()
        remove_shared_memory(b.config.experiment_dir, b.experiment)
        assert not serve[1].parent.exists()  # nothing of either is left behind
    finally:
        for p in (a, b):
            remove_shared_memory(p.config.experiment_dir, p.experiment)
