"""The tracking package without a flow: MLflow's parent run per experiment with its stages and sides nested
below, and the other monitors (tensorboard, wandb offline, none) — real stores in a temporary folder."""

from __future__ import annotations

import ast
import importlib.util
import typing
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import tracking
from deployments import load_recipe
from schemas import ExperimentConfig
from schemas.monitor import MonitorConfig
from tracking.tensorboard_monitor import TensorBoardMonitor


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
    first = tracking.start_run(sft, "flow-1")
    tracking.log_metrics(sft, first["run_id"], {"train/loss": 1.0}, 1)
    tracking.finish_run(sft, first["run_id"])
    parent = client.get_run(first["parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.info.run_name == "pipeline"
    second = tracking.start_run(rl, "flow-1")
    explorer = tracking.start_run(rl, "flow-2", role="explorer")
    assert second["parent_run_id"] == explorer["parent_run_id"] == first["parent_run_id"]
    assert client.get_run(parent.info.run_id).info.status == "RUNNING"  # while a nested run runs
    names = {r.info.run_name: r for r in client.search_runs([parent.info.experiment_id])}
    assert set(names) == {"pipeline", "sft_warmup", "rft", "rft (explorer)"}
    assert {names[n].data.tags[tracking.PARENT_TAG] for n in ("sft_warmup", "rft", "rft (explorer)")} == {parent.info.run_id}
    assert all(r.data.tags[tracking.GROUP_TAG] == "nightly" for r in names.values())
    tracking.fail_open_run(rl, role="explorer")
    tracking.finish_run(rl, second["run_id"])
    assert client.get_run(parent.info.run_id).info.status == "FAILED"  # one side failed
    again = tracking.start_run(rl, "flow-3", role="explorer")  # its retry continues it
    assert again["run_id"] == explorer["run_id"] and client.get_run(parent.info.run_id).info.status == "RUNNING"
    tracking.finish_run(rl, again["run_id"])
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"


def test_warnings_are_a_param_of_the_run(tmp_path: Path) -> None:
    config = load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path), "model.logprobs": 3})
    run = tracking.start_run(config, "flow")
    params = MlflowClient(tracking.tracking_uri(config)).get_run(run["run_id"]).data.params
    assert params["warnings"].startswith("model.logprobs: engines record the sampled token's logprob only")


@pytest.mark.parametrize("monitor", ["tensorboard", "wandb", "none"])
def test_other_monitors_log_without_mlflow(monitor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")  # never a network call
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    config = load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path), "monitor.monitor_type": monitor})
    run = tracking.start_run(config, "flow")
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
    run = tracking.start_run(config, "flow")
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


# -- each monitor on its own ------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ("backends", "tasks", "flows", "workflows", "buffer", "checkpointing", "algorithms", "deployments", "cli",
           "tracking", "preflight")


def test_every_monitor_type_has_one_monitor() -> None:
    assert set(tracking.MONITORS) == set(typing.get_args(MonitorConfig.model_fields["monitor_type"].annotation))
    for name, monitor in tracking.MONITORS.items():
        assert monitor.name == name and issubclass(monitor, tracking.Monitor)


def test_only_the_monitor_table_asks_which_monitor_it_is() -> None:
    """No comparison with `monitor_type` or a monitor's name anywhere in the runtime: each difference between
    monitors is a method of theirs, and `tracking.MONITORS` picks the monitor."""

    def asks(side: ast.expr) -> bool:
        return (isinstance(side, ast.Attribute) and side.attr == "monitor_type") or (
            isinstance(side, ast.Constant) and side.value in ("mlflow", "tensorboard", "wandb"))

    asked = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for package in RUNTIME
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Compare) and any(asks(side) for side in (node.left, *node.comparators))
    ]
    assert asked == []


def test_tensorboard_writes_the_metrics_and_tables_as_event_files(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path), "monitor.monitor_type": "tensorboard"})
    run = tracking.start_run(config, "flow")
    tracking.log_metrics(config, run["run_id"], {"explore/reward_mean": 0.25, "eval/arith-eval/strict@1": 0.5}, 1)
    tracking.log_metrics(config, run["run_id"], {"explore/reward_mean": 0.75}, 2)
    tracking.log_eval_table(config, run["run_id"], "arith-eval", [{"task_id": "a|b", "strict": 1.0}], 2)
    tracking.log_checkpoint(config, run["run_id"], 2, "/somewhere/global_step_2")
    assert tracking.curve_rows(config, run["run_id"]) == []  # TensorBoard draws its own curves
    tracking.fail_open_run(config)  # closes this process's writer (as a failed flow does)
    assert run["run_id"] not in TensorBoardMonitor._writers
    events = EventAccumulator(run["url"], size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    assert [(s.step, s.value) for s in events.Scalars("explore/reward_mean")] == [(1, 0.25), (2, 0.75)]
    assert [s.value for s in events.Scalars("engine_restarts")] == [0.0, 0.0]  # the tally goes with every step
    assert "eval/arith-eval/text_summary" in events.Tags()["tensors"]
    assert Path(run["url"]) == config.experiment_dir.resolve() / "log" / "tensorboard" / "main"


def test_none_writes_nothing_anywhere(tmp_path: Path) -> None:
    config = load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path / "root"), "monitor.monitor_type": "none"})
    run = tracking.start_run(config, "flow", role="explorer")
    tracking.log_metrics(config, run["run_id"], {"explore/reward_mean": 0.5}, 1)
    tracking.log_eval_table(config, run["run_id"], "arith-eval", [{"task_id": "t", "strict": 1.0}], 1)
    tracking.log_checkpoint(config, run["run_id"], 1, "/somewhere/global_step_1")
    assert tracking.log_reward_curve(config, run["run_id"]) is None and tracking.curve_rows(config, run["run_id"]) == []
    assert tracking.register_model(config, run["run_id"], "m", "x") is None
    tracking.tag_remote_model(config, run["run_id"], "tinker://a", "tinker://b")
    tracking.fail_open_run(config, role="explorer")
    tracking.finish_run(config, run["run_id"])
    assert "not tracked" in tracking.run_markdown(config, run)
    assert list(tmp_path.iterdir()) == []


def test_wandb_without_its_package_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None if name == "wandb" else real(name, *a, **k))
    with pytest.raises(ValueError, match=r"monitor.monitor_type: 'wandb' needs the wandb package"):
        load_recipe("smoke").with_overrides({"monitor.monitor_type": "wandb"})


def test_a_failed_start_without_any_run_creates_no_mlflow_store(tmp_path: Path) -> None:
    """A run that stopped at its pre-flight logged nothing: failing its open run creates nothing either."""
    config = load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path / "root")})
    tracking.fail_open_run(config)
    assert not (tmp_path / "root").exists()


def test_two_processes_open_a_new_sqlite_store_at_once(tmp_path: Path) -> None:
    """An explore and a train deployment of one experiment start together: both open the experiment's new
    SQLite store (MLflow alone fails one of them: "table registered_models already exists")."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = ("import sys\nfrom pathlib import Path\nfrom tracking.spool import TrackingClient\n"
            "client = TrackingClient(sys.argv[1], Path(sys.argv[2]))\n"
            "client.search_experiments(max_results=1)\nclient.search_registered_models(max_results=1)\n")
    sides = [subprocess.Popen([sys.executable, "-c", code, uri, str(tmp_path / f"spool-{i}")], cwd=root,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    for side in sides:
        _, err = side.communicate(timeout=120)
        assert side.returncode == 0, err[-3000:]
    assert MlflowClient(tracking_uri=uri).search_registered_models() == []
