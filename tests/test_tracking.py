"""tasks/tracking.py without a flow: MLflow's parent run per experiment with its stages and sides nested
below, and the other monitors (tensorboard, wandb offline, none) — real stores in a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from deployments import load_recipe
from schemas import ExperimentConfig
from tasks import tracking


def two_stages(root: Path) -> list[ExperimentConfig]:
    config = load_recipe("smoke").with_overrides({
        "checkpoint_root_dir": str(root), "name": "pipeline", "group": "nightly",
        "stages": [{"stage_name": "sft_warmup", "mode": "train", "algorithm": {"algorithm_type": "sft"},
                    "buffer": {"batch_size": 2, "trainer_input": {"experience_buffer": {"path": "rows.jsonl"}}}},
                   {"stage_name": "rft"}],
    })
    return config.resolve_stages()


def test_an_experiment_is_one_parent_run_with_its_stages_and_sides_nested(tmp_path: Path) -> None:
    sft, rl = two_stages(tmp_path)
    client = MlflowClient(tracking.tracking_uri(sft))
    first = tracking.start_mlflow_run.fn(sft, "flow-1")
    tracking.log_metrics(sft, first["run_id"], {"train/loss": 1.0}, 1)
    tracking.finish_run(sft, first["run_id"])
    parent = client.get_run(first["parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.info.run_name == "pipeline"
    second = tracking.start_mlflow_run.fn(rl, "flow-1")
    explorer = tracking.start_mlflow_run.fn(rl, "flow-2", role="explorer")
    assert second["parent_run_id"] == explorer["parent_run_id"] == first["parent_run_id"]
    assert client.get_run(parent.info.run_id).info.status == "RUNNING"  # while a nested run runs
    names = {r.info.run_name: r for r in client.search_runs([parent.info.experiment_id])}
    assert set(names) == {"pipeline", "sft_warmup", "rft", "rft (explorer)"}
    assert {names[n].data.tags[tracking.PARENT_TAG] for n in ("sft_warmup", "rft", "rft (explorer)")} == {parent.info.run_id}
    assert all(r.data.tags[tracking.GROUP_TAG] == "nightly" for r in names.values())
    tracking.fail_open_run(rl, role="explorer")
    tracking.finish_run(rl, second["run_id"])
    assert client.get_run(parent.info.run_id).info.status == "FAILED"  # one side failed
    again = tracking.start_mlflow_run.fn(rl, "flow-3", role="explorer")  # its retry continues it
    assert again["run_id"] == explorer["run_id"] and client.get_run(parent.info.run_id).info.status == "RUNNING"
    tracking.finish_run(rl, again["run_id"])
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"


def test_warnings_are_a_param_of_the_run(tmp_path: Path) -> None:
    config = load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path), "model.logprobs": 3})
    run = tracking.start_mlflow_run.fn(config, "flow")
    params = MlflowClient(tracking.tracking_uri(config)).get_run(run["run_id"]).data.params
    assert params["warnings"].startswith("model.logprobs: engines record the sampled token's logprob only")


@pytest.mark.parametrize("monitor", ["tensorboard", "wandb", "none"])
def test_other_monitors_log_without_mlflow(monitor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")  # never a network call
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    config = load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path), "monitor.monitor_type": monitor})
    run = tracking.start_mlflow_run.fn(config, "flow")
    for step in (1, 2):
        tracking.log_metrics(config, run["run_id"], {"explore/reward_mean": 0.5 * step}, step)
    tracking.log_eval_table(config, run["run_id"], "gsm8k-eval", [{"task_id": "t", "accuracy": 1.0}], 2)
    assert tracking.log_reward_curve(config, run["run_id"]) is None and tracking.register_model(config, run["run_id"], "m", "x") is None
    tracking.finish_run(config, run["run_id"])
    logs = config.experiment_dir / "log"
    assert not (tmp_path / "mlflow.db").exists()
    if monitor == "tensorboard":
        assert list((logs / "tensorboard" / "main").glob("events.out.tfevents.*"))
    elif monitor == "wandb":
        assert list((logs / "wandb").glob("offline-run-*"))
    else:
        assert not logs.exists() and run["run_id"].startswith("none|")


def test_the_curve_as_a_picture_and_as_rows(tmp_path: Path) -> None:
    config = load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path)})
    run = tracking.start_mlflow_run.fn(config, "flow")
    tracking.log_metrics(config, run["run_id"], {"eval/arith-eval/strict": 0.01, "eval/arith-eval/format": 0.02}, 0)
    for step in (1, 2):
        tracking.log_metrics(config, run["run_id"], {"explore/reward_mean": 0.1 * step, "explore/format": 0.3 * step}, step)
    tracking.log_metrics(config, run["run_id"], {"eval/arith-eval/strict": 0.5, "eval/arith-eval/format": 0.9}, 2)
    assert tracking.log_reward_curve(config, run["run_id"]).is_file()
    assert tracking.curve_rows(config, run["run_id"]) == [
        {"step": 0, "explore/reward_mean": "", "explore/format": "", "eval/arith-eval/format": 0.02, "eval/arith-eval/strict": 0.01},
        {"step": 1, "explore/reward_mean": 0.1, "explore/format": 0.3, "eval/arith-eval/format": "", "eval/arith-eval/strict": ""},
        {"step": 2, "explore/reward_mean": 0.2, "explore/format": 0.6, "eval/arith-eval/format": 0.9, "eval/arith-eval/strict": 0.5},
    ]
    tracking.finish_run(config, run["run_id"])
