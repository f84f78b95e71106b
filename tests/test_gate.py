"""The promotion gate: a new model takes the registry alias `champion` only if it beats the holder on the
same held-out set by the margin. On a real MLflow registry (SQLite), and through two nightly runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from pydantic import ValidationError

from deployments import load_recipe
from deployments.prefect_yaml import PREFECT_YAML
from schemas import ExperimentConfig
from tracking.gate import HELDOUT_TAG, promote, value_tag
from tracking.spool import TrackingClient

METRIC = "hello-eval/reward_mean"


def registered_run(client: MlflowClient, name: str, folder: Path) -> str:
    """A run with a registered version pointing at a folder, as close_stage leaves it."""
    experiment = client.get_experiment_by_name("gate") or client.get_experiment(client.create_experiment("gate"))
    run = client.create_run(experiment.experiment_id)
    folder.mkdir(parents=True)
    try:
        client.get_registered_model(name)
    except Exception:
        client.create_registered_model(name)
    client.create_model_version(name, source=folder.resolve().as_uri(), run_id=run.info.run_id)
    return run.info.run_id


def test_the_champion_changes_only_for_a_win_by_the_margin(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = TrackingClient(uri, tmp_path / "spool.jsonl")
    raw = MlflowClient(tracking_uri=uri)
    nights = {night: registered_run(raw, "rft-hello", tmp_path / night) for night in ("mon", "tue", "wed", "thu", "fri")}

    first = promote(client, nights["mon"], "rft-hello", METRIC, 0.50, "set-a", 0.02, "champion")
    assert first["promoted"] and first["holder_version"] is None
    worse = promote(client, nights["tue"], "rft-hello", METRIC, 0.40, "set-a", 0.02, "champion")
    assert not worse["promoted"] and worse["holder_value"] == 0.50 and worse["value"] == 0.40
    by_less = promote(client, nights["wed"], "rft-hello", METRIC, 0.51, "set-a", 0.02, "champion")
    assert not by_less["promoted"]
    other_set = promote(client, nights["thu"], "rft-hello", METRIC, 0.90, "set-b", 0.02, "champion")
    assert not other_set["promoted"] and other_set["holder_value"] is None  # not comparable: the holder stays
    better = promote(client, nights["fri"], "rft-hello", METRIC, 0.60, "set-a", 0.02, "champion")
    assert better["promoted"] and better["holder_version"] == first["version"]

    again = promote(client, nights["fri"], "rft-hello", METRIC, 0.60, "set-a", 0.02, "champion")  # a re-run
    assert again["promoted"] and again["version"] == better["version"]
    holder = raw.get_model_version_by_alias("rft-hello", "champion")
    assert holder.version == better["version"] and holder.tags[value_tag(METRIC)] == "0.6"
    assert holder.tags[HELDOUT_TAG] == "set-a"
    tuesday = raw.get_model_version("rft-hello", worse["version"])  # the decision and both numbers
    assert "did not take 'champion'" in tuesday.description and "0.4000 vs 0.5000" in tuesday.description
    assert "took 'champion'" in raw.get_model_version("rft-hello", better["version"]).description


def test_a_gate_names_a_taskset_the_experiment_evaluates() -> None:
    with pytest.raises(ValidationError, match=r"monitor\.gate\.metric.*'nope'.*hello-eval"):
        load_recipe("hello").with_overrides({"monitor.gate": {"metric": "nope/reward"}})
    with pytest.raises(ValidationError, match=r"monitor\.gate.*mlflow"):
        load_recipe("hello").with_overrides({"monitor.gate": {"metric": METRIC}, "monitor.monitor_type": "none"})


def test_the_nightly_deployment_has_the_gate() -> None:
    (nightly,) = [d for d in yaml.safe_load(PREFECT_YAML.read_text())["deployments"] if d.get("schedules")]
    assert nightly["name"] == "gsm8k"
    config = ExperimentConfig.model_validate(nightly["parameters"]["config"])
    assert config.monitor.gate is not None and config.monitor.gate.alias == "champion"
    assert config.monitor.gate.metric.split("/")[0] in [ts.name for ts in config.buffer.explorer_input.eval_tasksets]
    assert nightly["parameters"]["name_per_flow_run"] is True  # each night its own experiment, one registered model


@pytest.mark.slow
def test_two_nightly_runs_the_worse_second_keeps_the_champion(tmp_path: Path) -> None:
    """Two nights of hello, the second with a learning rate that wrecks the LoRA: it loses, `champion` stays."""
    from flows.rft import rft

    base = load_recipe("hello").with_overrides({
        "checkpoint_root_dir": str(tmp_path / "checkpoints"), "buffer.total_steps": 2, "explorer.eval_interval": 2,
        "trainer.save_interval": 2, "explorer.eval_on_startup": False,
        "monitor.gate": {"metric": METRIC, "margin": 0.01},
    })
    night1 = rft(config=base, name_per_flow_run=True)
    night2 = rft(config=base, overrides={"algorithm.optimizer.lr": 0.05}, name_per_flow_run=True)
    first, second = night1["gate"], night2["gate"]
    assert first["promoted"], first
    assert second["value"] < first["value"] - 0.01, (first, second)  # the second night is worse
    assert not second["promoted"] and second["holder_value"] == pytest.approx(first["value"])
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'checkpoints' / 'mlflow.db'}")
    assert client.get_model_version_by_alias("rft-hello", "champion").version == first["version"]
    assert "did not take 'champion'" in client.get_model_version("rft-hello", second["version"]).description
    # each night's decision also lies in its experiment folder, where up.sh reads it
    written = sorted((tmp_path / "checkpoints" / "rft").glob("hello-*/gate.json"), key=lambda p: p.stat().st_mtime)
    assert [json.loads(p.read_text())["promoted"] for p in written] == [True, False]
