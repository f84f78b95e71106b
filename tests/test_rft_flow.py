"""The smoke recipe through the real stack: Prefect, Ray, vLLM (CPU), the torch trainer, MLflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file

from buffer.experience_store import ExperienceStore
from deployments import load_recipe
from schemas import ExperimentConfig
from tasks.tracking import EXPERIMENT_TAG, tracking_uri

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[ExperimentConfig, dict]:
    from flows.rft import rft
    from tasks import progress

    root = tmp_path_factory.mktemp("smoke")
    config = load_recipe("smoke").with_overrides(
        {"checkpoint_root_dir": str(root / "checkpoints"), "cluster.ray_address": "local"}
    )
    seen: list[tuple[int, int]] = []
    progress.LISTENERS.append(lambda step, total, metrics: seen.append((step, total)))
    try:
        outcome = rft(config=config)
    finally:
        progress.LISTENERS.clear()
    outcome["progress_seen"] = seen
    return config, outcome


def test_runs_every_step_and_reports_progress(smoke_run: tuple[ExperimentConfig, dict]) -> None:
    config, outcome = smoke_run
    result = outcome[config.name]
    assert result["steps"] == 2
    assert outcome["progress_seen"] == [(1, 2), (2, 2)]
    assert set(result["eval"]) == {"gsm8k-eval"}
    assert 0.0 <= result["eval"]["gsm8k-eval"]["accuracy"] <= 1.0


def test_every_experience_is_persisted_and_trained_once(smoke_run: tuple[ExperimentConfig, dict]) -> None:
    config, _ = smoke_run
    store = ExperienceStore.for_experiment(config.experiment_dir)
    try:
        per_step = config.buffer.batch_size * config.algorithm.repeat_times
        assert store.count() == 2 * per_step
        assert store.count_untrained() == 0
        trained = store.trained_eids()
        assert sorted(set(trained.values())) == [1, 2]
        assert len(trained) == len(set(store.all_eids())) == 2 * per_step
        experiences = store.take(100) or []
    finally:
        store.close()
    assert experiences == []  # nothing left to train


def test_final_model_differs_from_base_and_loads(smoke_run: tuple[ExperimentConfig, dict]) -> None:
    from backends.models import resolve_model_path

    config, outcome = smoke_run
    final = Path(outcome[config.name]["final_model"])
    assert final == config.experiment_dir.resolve() / "final" / "huggingface"
    assert final.resolve() == (config.experiment_dir / "global_step_2" / "actor" / "huggingface").resolve()
    assert (final / "config.json").exists() and (final / "tokenizer.json").exists()
    trained = load_file(str(final / "model.safetensors"))
    base = load_file(str(resolve_model_path(config.model.model_path) / "model.safetensors"))
    changed = [k for k in trained if k in base and not torch.equal(trained[k].float(), base[k].float())]
    assert changed, "training changed no weight"


def test_mlflow_run_has_params_metrics_and_artifacts(smoke_run: tuple[ExperimentConfig, dict]) -> None:
    config, outcome = smoke_run
    client = MlflowClient(tracking_uri=tracking_uri(config))
    run = client.get_run(outcome[config.name]["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.tags[EXPERIMENT_TAG] == str(config.experiment_dir.resolve())
    assert "prefect.flow_run_id" in run.data.tags
    assert run.data.params["algorithm.algorithm_type"] == "grpo"
    for key in ("explore/reward_mean", "train/loss", "train/grad_norm", "time/explore_s", "time/train_s", "time/sync_s"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [1, 2], key
    assert client.get_metric_history(run.info.run_id, "eval/gsm8k-eval/accuracy")
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "reward_curve.png", "eval"} <= artifacts
    logged = json.loads(Path(client.download_artifacts(run.info.run_id, "config.json")).read_text())
    assert logged["name"] == config.name
    assert run.data.tags["checkpoint.global_step_2"].endswith("global_step_2")
    (version,) = client.search_model_versions(f"name='{config.project}-{config.name}'")
    assert version.run_id == run.info.run_id and version.source.endswith("global_step_2/actor/huggingface")
