"""Asynchronous RFT: which weights version each explore step samples with, the explorer running ahead
of the trainer by sync_offset, and bench mode on what that run saved. (Explorer and trainer as separate
deployments of one experiment, each killed and retried: tests/test_deployment.py.)"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from backends.schedule import Schedule
from buffer.experience_store import ExperienceStore
from checkpointing.layout import complete_steps
from deployments import load_recipe
from flows import meeting
from schemas import ExperimentConfig
from tracking import ROLE_TAG, tracking_uri

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("offset", "interval", "versions"),
    [
        (0, 1, [0, 1, 2, 3, 4, 5]),  # on-policy: step k samples with k-1
        (1, 1, [0, 0, 1, 2, 3, 4]),  # one step ahead
        (0, 2, [0, 0, 2, 2, 4, 4]),  # a sync every second step
        (1, 2, [0, 0, 0, 2, 2, 4]),
    ],
)
def test_fixed_style_samples_each_step_with_an_exact_version(offset: int, interval: int, versions: list[int]) -> None:
    config = load_recipe("smoke").with_overrides(
        {"buffer.total_steps": 6, "synchronizer.sync_offset": offset, "synchronizer.sync_interval": interval})
    schedule = Schedule.of(config)
    assert [schedule.version_for_step(k) for k in range(1, 7)] == versions
    staleness = [(k - 1) - v for k, v in enumerate(versions, start=1)]
    assert max(staleness) == offset + interval - 1
    assert [schedule.publish_due(t, 6, requested=False) for t in range(1, 7)] == [
        t % interval == 0 or t == 6 for t in range(1, 7)]


def test_driven_styles_sample_with_the_newest_version() -> None:
    config = load_recipe("smoke").with_overrides({"synchronizer.sync_style": "explorer_driven"})
    schedule = Schedule.of(config)
    assert schedule.version_for_step(5) is None
    assert schedule.publish_due(1, 2, requested=True) and not schedule.publish_due(1, 3, requested=False)


def test_a_wait_fails_naming_the_other_side() -> None:
    with pytest.raises(meeting.SyncTimeoutError, match=r"waited 0 s .*for explore step 3; the explorer's last finished step is 1"):
        meeting.wait_until(lambda: False, timeout_s=0.2, waiting_for="explore step 3",
                            other_side=lambda: "the explorer's last finished step is 1")


def staleness_of(config: ExperimentConfig) -> dict[int, set[int]]:
    """Explore step → the staleness (trainer version - sampling version) of its trained experiences."""
    store = ExperienceStore.for_experiment(config.experiment_dir)
    try:
        rows = store.versions()
        assert len(set(store.all_eids())) == len(rows)
    finally:
        store.close()
    out: dict[int, set[int]] = {}
    for explore_step, version, train_step in rows:
        assert train_step == explore_step  # each trained once, by its own step
        out.setdefault(explore_step, set()).add((train_step - 1) - version)
    return out


@pytest.fixture(scope="module")
def overlapped(module_tmp_path: Path, tiny_model_path: str) -> tuple[ExperimentConfig, dict]:
    """smoke, 3 steps, the explorer one step ahead of the trainer (explore of step k+1 ‖ train of step k).
    The tiny model (tests/tiny_model.py), 16-token answers and no evaluation before training (test_rft_flow.py
    checks that one, made by the same code before the sides split): what is checked is the record, not learning."""
    from flows.rft import rft

    config = load_recipe("smoke").with_overrides({
        "name": "overlap", "checkpoint_root_dir": str(module_tmp_path), "model.model_path": tiny_model_path,
        "cluster.ray_address": "local", "buffer.total_steps": 3, "synchronizer.sync_offset": 1,
        "model.max_response_tokens": 16, "explorer.eval_on_startup": False,
    })
    return config, rft(config=config)[config.name]


@pytest.mark.slow
def test_overlapped_run_keeps_staleness_exactly_as_configured(overlapped: tuple[ExperimentConfig, dict]) -> None:
    config, outcome = overlapped
    assert outcome["steps"] == 3
    assert staleness_of(config) == {1: {0}, 2: {1}, 3: {1}}  # step 1 has nothing older than the start
    client = MlflowClient(tracking_uri=tracking_uri(config))
    history = client.get_metric_history(outcome["mlflow_run_id"], "train/staleness_max")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [(1, 0.0), (2, 1.0), (3, 1.0)]
    evaluated = sorted(m.step for m in client.get_metric_history(outcome["mlflow_run_id"], "eval/gsm8k-eval/accuracy"))
    # the final model only: the explorer evaluates the due versions (every eval_interval = 2) it loads, and
    # with sync_offset 1 it samples its last step (3) with version 1, so it never loads version 2
    assert evaluated == [3]


def trained_versions(experiment: Path) -> list[tuple[int, int, int, str]]:
    """(explore step, weights version it sampled with, train step, task) of every experience."""
    with sqlite3.connect(experiment / "buffer" / "experiences.db") as conn:
        rows = conn.execute("SELECT eid, explore_step, model_version, train_step FROM experiences").fetchall()
    return sorted((explored, version, trained, eid.split("@")[0]) for eid, explored, version, trained in rows)


def explored_tokens(experiment: Path) -> dict[str, float]:
    store = ExperienceStore.for_experiment(experiment)
    try:
        return {str(step): store.explored_tokens(step)["explore/tokens_sampled"] for step in (1, 2, 3)}
    finally:
        store.close()


@pytest.mark.slow
def test_an_overlapped_run_stops_at_its_budget_and_resumes_to_the_unbudgeted_state(
        tmp_path: Path, overlapped: tuple[ExperimentConfig, dict]) -> None:
    """sync_offset 1: the explorer runs a step ahead. The trainer keeps the ledger (what the explorer sampled for
    each step is in the buffer) and stops at the budget; the explorer stops at its next step, and what it
    explored ahead is trained by the resume. The unbudgeted run it ends equal to is this module's `overlapped`
    (its evaluation at step 3 and its checkpoint of every step change no task, version or train step)."""
    from flows.rft import rft

    budgeted = overlapped[0].with_overrides({  # the same run, in a folder of its own, no evaluation
        "name": "overlap-budgeted", "checkpoint_root_dir": str(tmp_path / "checkpoints"), "trainer.save_interval": 3,
        "buffer.explorer_input.eval_tasksets": [], "budget.max_tokens": 1,
    })
    assert not budgeted.warnings
    stopped = rft(config=budgeted, return_state=True)
    assert stopped.is_completed() and stopped.name == "BudgetReached", stopped
    exp = budgeted.experiment_dir
    summary: dict[str, Any] = json.loads((exp / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["planned_steps"] == 3 and "budget.max_tokens 1" in summary["stopped"]
    assert complete_steps(exp) == [1]
    assert [trained for _, _, trained, _ in trained_versions(exp)].count(1) == 4  # step 1 trained, nothing after it

    rft(config=budgeted.with_overrides({"budget.max_tokens": None}))
    other = overlapped[0].experiment_dir
    # the same final state: each step explored the same tasks with the same weights version, trained once by its step
    assert trained_versions(exp) == trained_versions(other)
    assert [(explored, version, trained) for explored, version, trained, _ in trained_versions(exp)] == (
        [(1, 0, 1)] * 4 + [(2, 0, 2)] * 4 + [(3, 1, 3)] * 4)
    assert complete_steps(exp)[-1] == complete_steps(other)[-1] == 3
    finished = json.loads((exp / "summary.json").read_text())
    assert finished["steps"] == 3 and "stopped" not in finished
    usage = json.loads((exp / "usage.json").read_text())["steps"]
    assert {step: entry["tokens_sampled"] for step, entry in usage.items()} == explored_tokens(exp)  # once each
    assert finished["usage"]["tokens_sampled"] == sum(explored_tokens(exp).values())
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'checkpoints' / 'mlflow.db'}")
    assert client.get_run(finished["mlflow_run_id"]).info.run_id == summary["mlflow_run_id"]  # continued
    assert sorted(m.step for m in client.get_metric_history(summary["mlflow_run_id"], "usage/tokens_sampled")) == [1, 2, 3]


@pytest.mark.slow
@pytest.mark.parametrize("style", ["trainer_driven", "explorer_driven"])
def test_driven_run_trains_every_experience_once_within_its_staleness_bound(
        style: str, tmp_path: Path, tiny_model_path: str) -> None:
    """The driven styles as a whole run: the sides overlap, the explorer samples with the newest weights it
    has, and `max_staleness: 1` bounds how far it may run ahead. Which version a step gets depends on the
    timing, so what is exact is the record: every experience trained once by its own step, none staler than
    the bound, and the staleness the trainer logs per step equals that of the experiences it trained."""
    from flows.rft import rft

    config = load_recipe("smoke").with_overrides({
        "name": f"driven-{style}", "checkpoint_root_dir": str(tmp_path), "cluster.ray_address": "local",
        "model.model_path": tiny_model_path,
        "buffer.total_steps": 3, "synchronizer.sync_style": style, "synchronizer.sync_interval": 1,
        "algorithm.sample_strategy_args": {"max_staleness": 1},
        "model.max_response_tokens": 16, "explorer.eval_on_startup": False, "buffer.explorer_input.eval_tasksets": [],
    })
    assert Schedule.of(config).overlapped
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 3
    staleness = staleness_of(config)  # asserts each experience trained once, by its own explore step
    assert sorted(staleness) == [1, 2, 3] and staleness[1] == {0}
    assert all(0 <= s <= 1 for values in staleness.values() for s in values)
    client = MlflowClient(tracking_uri=tracking_uri(config))
    logged = {
        bound: {int(m.step): int(m.value) for m in client.get_metric_history(outcome["mlflow_run_id"], f"train/staleness_{bound}")}
        for bound in ("min", "max")
    }
    assert logged["min"] == {k: min(v) for k, v in staleness.items()}
    assert logged["max"] == {k: max(v) for k, v in staleness.items()}


def rft_cli(root: Path, name: str, *settings: str) -> subprocess.Popen:
    """`rft run smoke --set ...` in its own process, with its own temporary Prefect server."""
    home = root / f"prefect-{name}"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"PREFECT_HOME": str(home)}
    sets = [arg for setting in settings for arg in ("--set", setting)]
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "run", "smoke", *sets], cwd=ROOT, env=env,
        stdout=open(root / f"{name}.log", "w"), stderr=subprocess.STDOUT,
    )


@pytest.mark.slow
@pytest.mark.full  # ~1.7 min: scripts/test.sh --full
def test_bench_mode_logs_an_eval_curve_of_the_saved_checkpoints(
    overlapped: tuple[ExperimentConfig, dict], tmp_path: Path
) -> None:
    config, _ = overlapped
    bench = rft_cli(tmp_path, "bench", f"checkpoint_root_dir={config.checkpoint_root_dir}", "name=overlap",
                    "mode=bench", "cluster.ray_address=local", f"model.model_path={config.model.model_path}")
    assert bench.wait(timeout=900) == 0, (tmp_path / "bench.log").read_text()[-3000:]
    log = (tmp_path / "bench.log").read_text()
    assert "Traceback" not in log, log[-5000:]  # a clean `rft run` on its temporary server: no Prefect-internal one
    client = MlflowClient(tracking_uri=tracking_uri(config))
    (run,) = [r for r in client.search_runs([client.get_experiment_by_name("rft").experiment_id])
              if r.data.tags[ROLE_TAG] == "bench"]
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "eval/gsm8k-eval/accuracy"))
    assert steps == [0, 1, 2, 3]  # the base model and every saved checkpoint (save_interval 1)
    assert "bench_curve.png" in {a.path for a in client.list_artifacts(run.info.run_id)}
