"""Cost and budget: every step's usage is recorded (tokens, wall seconds by side), and a run with a token
budget stops cleanly at it — checkpointed, its summary marked, Completed as BudgetReached — and resumes
under a larger one to the same final state as a run that had no budget."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from checkpointing.layout import complete_steps
from deployments import load_recipe
from schemas.budget import BudgetConfig
from tracking import ROLE_TAG
from tracking.usage import Ledger, over_budget


def test_the_ledger_counts_on_from_the_checkpoint(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path, done=0)
    for step in (1, 2, 3):
        ledger.add(step, {"explore/tokens_sampled": 10.0, "explore/tokens_prompt": 5.0, "time/train_s": 1.0}, wall_s=2.0)
    assert ledger.totals()["tokens_sampled"] == 30 and ledger.totals()["tokens_trained"] == 45
    resumed = Ledger(tmp_path, done=2)  # step 3 ran after the checkpoint: it runs, and is counted, again
    assert resumed.totals()["tokens_sampled"] == 20 and resumed.metrics()["usage/wall_s"] == 4.0
    assert over_budget(BudgetConfig(max_tokens=20), resumed.totals()) is not None
    assert over_budget(BudgetConfig(max_tokens=21), resumed.totals()) is None
    assert "wall-time" in str(over_budget(BudgetConfig(max_wall_minutes=0.05), resumed.totals()))
    assert over_budget(BudgetConfig(), resumed.totals()) is None


def test_a_budget_where_nothing_checks_it_is_a_warning() -> None:
    config = load_recipe("smoke").with_overrides({"budget.max_tokens": 100, "synchronizer.sync_offset": 1})
    assert any(w.startswith("budget.max_tokens") for w in config.warnings)
    assert not load_recipe("smoke").with_overrides({"budget.max_tokens": 100}).warnings


def steps_and_tasks(experiment: Path) -> list[tuple[int, int, str]]:
    """(explore step, train step, task) of every experience: what each step explored and trained."""
    with sqlite3.connect(experiment / "buffer" / "experiences.db") as conn:
        rows = conn.execute("SELECT eid, explore_step, train_step FROM experiences").fetchall()
    return sorted((explored, trained, eid.split("@")[0]) for eid, explored, trained in rows)


@pytest.mark.slow
def test_a_token_budget_stops_the_run_and_a_larger_one_resumes_it(tmp_path: Path) -> None:
    from flows.rft import rft

    base = load_recipe("smoke").with_overrides({
        "checkpoint_root_dir": str(tmp_path / "checkpoints"), "buffer.total_steps": 3, "trainer.save_interval": 3,
        "explorer.eval_on_startup": False, "buffer.explorer_input.eval_tasksets": [], "model.max_response_tokens": 16,
    })
    budgeted = base.with_overrides({"name": "budgeted", "budget.max_tokens": 1})  # reached by the first step
    stopped = rft(config=budgeted, return_state=True)
    assert stopped.is_completed() and stopped.name == "BudgetReached", stopped
    assert "token budget reached" in str(stopped.message)
    exp = budgeted.experiment_dir
    summary: dict[str, Any] = json.loads((exp / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["planned_steps"] == 3 and "budget.max_tokens 1" in summary["stopped"]
    assert complete_steps(exp) == [1]  # checkpointed at the stop, though save_interval is 3
    assert summary["usage"]["tokens_sampled"] >= 1

    resumed = rft(config=budgeted.with_overrides({"budget.max_tokens": 10**9}))
    unbudgeted = rft(config=base.with_overrides({"name": "unbudgeted"}))
    for outcome in (resumed, unbudgeted):
        assert outcome[next(iter(outcome))]["steps"] == 3 and "stopped" not in outcome[next(iter(outcome))]
    other = base.with_overrides({"name": "unbudgeted"}).experiment_dir
    # the same final state: the same steps, each exploring the same tasks and training them once
    assert steps_and_tasks(exp) == steps_and_tasks(other)
    assert [trained for _, trained, _ in steps_and_tasks(exp)] == [1] * 4 + [2] * 4 + [3] * 4
    assert complete_steps(exp)[-1] == complete_steps(other)[-1] == 3
    assert (exp / "final" / "huggingface").is_dir() and (other / "final" / "huggingface").is_dir()
    usage = json.loads((exp / "usage.json").read_text())["steps"]
    assert sorted(usage, key=int) == ["1", "2", "3"]  # counted once each across the stop and the resume
    finished = json.loads((exp / "summary.json").read_text())
    assert finished["usage"]["tokens_sampled"] == sum(u["tokens_sampled"] for u in usage.values())

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'checkpoints' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("rft").experiment_id],
                              filter_string=f"tags.`{ROLE_TAG}` = 'main'")
    (continued,) = [r for r in runs if r.info.run_id == finished["mlflow_run_id"]]  # the resume continued it
    assert continued.info.run_id == summary["mlflow_run_id"] and continued.info.status == "FINISHED"
    history = client.get_metric_history(continued.info.run_id, "usage/tokens_sampled")
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert max(m.value for m in history) == finished["usage"]["tokens_sampled"]
