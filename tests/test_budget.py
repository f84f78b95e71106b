"""Cost and budget: every step's usage is recorded (tokens, wall seconds by side), and a run with a token
budget stops cleanly at it — checkpointed, its summary marked, Completed as BudgetReached — and resumes
under a larger one to the same final state as a run that had no budget."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from buffer.experience import Experience
from buffer.experience_store import ExperienceStore
from checkpointing.layout import complete_steps
from deployments import load_recipe
from flows import meeting
from schemas import ExperimentConfig
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


def test_the_ledger_counts_the_tokens_the_trainer_ran(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path, done=0)  # an SFT step samples nothing; its trainer reports what it ran
    ledger.add(1, {"train/train_tokens": 120.0, "time/train_s": 1.0}, wall_s=1.5)
    assert ledger.totals()["tokens_trained"] == 120 and ledger.totals()["tokens_sampled"] == 0


def test_the_ledger_counts_gpu_seconds_by_side_and_stops_at_the_gpu_hours(tmp_path: Path) -> None:
    # a step on GPUs: 2 engines' GPUs explore 10 s and evaluate 4 s, the trainer's 1 trains 5 s, all 3 sync 1 s
    step = {"time/explore_s": 10.0, "explore/gpus": 2.0, "time/train_s": 5.0, "train/gpus": 1.0, "time/sync_s": 1.0,
            "sync/gpus": 3.0, "time/eval_s": 4.0, "explore/cpu_s": 7.5, "train/cpu_s": 3.0}
    ledger = Ledger(tmp_path / "gpu", done=0)
    for n in (1, 2):
        ledger.add(n, step, wall_s=30.0)
    totals = ledger.totals()
    assert (totals["explore_gpu_s"], totals["train_gpu_s"], totals["sync_gpu_s"], totals["eval_gpu_s"]) == (40, 10, 6, 16)
    assert totals["gpu_s"] == 72 and (totals["explore_cpu_s"], totals["train_cpu_s"], totals["sync_cpu_s"]) == (15, 6, 0)
    assert "GPU-hour budget reached" in str(over_budget(BudgetConfig(max_gpu_hours=72 / 3600), totals))
    assert over_budget(BudgetConfig(max_gpu_hours=73 / 3600), totals) is None
    assert Ledger(tmp_path / "gpu", done=1).metrics()["usage/gpu_s"] == 36  # a resume keeps step 1's
    # on CPU the sides hold no GPUs: their seconds cost no GPU time, and a GPU-hour budget never stops the run
    cpu = Ledger(tmp_path / "cpu", done=0)
    cpu.add(1, step | {"explore/gpus": 0.0, "train/gpus": 0.0, "sync/gpus": 0.0}, wall_s=30.0)
    assert cpu.totals()["gpu_s"] == 0 and cpu.totals()["explore_cpu_s"] == 7.5
    assert over_budget(BudgetConfig(max_gpu_hours=1e-9), cpu.totals()) is None


# Run in a fresh process: a pytest worker's tree holds the processes of earlier tests (Ray, Prefect), and one of
# them ending during the check takes its seconds out of the count (process_tree_cpu_s may lag, by design).
CHILDREN_CHECK = """
import subprocess, sys, time
import psutil
from backends.cpu_time import process_tree_cpu_s
before = process_tree_cpu_s()
burn = "import sys, time\\nend = time.process_time() + 0.5\\nwhile time.process_time() < end: pass\\nsys.stdin.read()"
child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE)
try:
    deadline = time.time() + 60
    while sum(psutil.Process(child.pid).cpu_times()[:2]) < 0.5 and time.time() < deadline:
        time.sleep(0.05)
    live = process_tree_cpu_s() - before
finally:
    child.communicate(b"")
ended = process_tree_cpu_s() - before
assert live >= 0.5, f"the live child's seconds: {live}"
assert ended >= 0.5, f"ended and waited for, its parent's count keeps it: {ended}"
"""


def test_a_process_counts_the_cpu_seconds_of_its_children() -> None:
    """What an engine or trainer actor reports: its child processes count while they run and after they end."""
    done = subprocess.run([sys.executable, "-c", CHILDREN_CHECK], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_buffer_says_what_an_explore_step_sampled(tmp_path: Path) -> None:
    store = ExperienceStore.for_experiment(tmp_path)
    try:
        store.put([Experience(eid=f"t{i}@{step}", task_id=f"t{i}", group_id=f"t{i}", prompt_token_ids=[1] * 5,
                              response_token_ids=[2] * (i + 1), logprobs=[0.0] * (i + 1), reward=0.0, explore_step=step)
                   for step in (1, 2) for i in range(2)])
        assert store.explored_tokens(2) == {"explore/tokens_sampled": 3.0, "explore/tokens_prompt": 10.0}
        assert store.explored_tokens(3) == {"explore/tokens_sampled": 0.0, "explore/tokens_prompt": 0.0}
    finally:
        store.close()


def test_an_explorer_follows_only_a_stop_of_its_own_attempt(tmp_path: Path) -> None:
    config = load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path)})
    started = time.time()
    assert meeting.stop_announced(config, since=started) is None
    meeting.announce_stop(config, 1, "token budget reached")
    assert meeting.stop_announced(config, since=started)["after_train_step"] == 1
    assert meeting.stop_announced(config, since=time.time() + 1) is None  # a later attempt's explorer


def test_a_budget_where_nothing_checks_it_is_a_warning() -> None:
    smoke = load_recipe("smoke")
    for mode in ("bench", "explore"):
        assert any(w.startswith("budget.max_tokens") for w in smoke.with_overrides({"budget.max_tokens": 100, "mode": mode}).warnings)
    # every stage that trains keeps the ledger: in turns, overlapped, a train deployment
    for settings in ({}, {"synchronizer.sync_offset": 1}, {"synchronizer.sync_style": "trainer_driven"}, {"mode": "train"}):
        assert not smoke.with_overrides({"budget.max_tokens": 100, **settings}).warnings, settings
    sft = sft_config(Path("/tmp/unused"), name="sft")
    assert any("samples no tokens" in w for w in sft.with_overrides({"budget.max_tokens": 100}).warnings)
    assert not sft.with_overrides({"budget.max_wall_minutes": 1}).warnings
    # no GPUs to count: on CPU (cluster.gpu_per_node 0), or where a service trains and samples (Tinker)
    no_gpus = "budget.max_gpu_hours never stops it"
    assert any(no_gpus in w for w in smoke.with_overrides({"budget.max_gpu_hours": 1}).warnings)
    tinker = load_recipe("gsm8k-tinker").with_overrides({"cluster.gpu_per_node": None, "budget.max_gpu_hours": 1})
    assert any(no_gpus in w for w in tinker.warnings)
    assert not any(no_gpus in w for w in load_recipe("gsm8k-qwen").with_overrides({"budget.max_gpu_hours": 1}).warnings)


def steps_and_tasks(experiment: Path) -> list[tuple[int, int, str]]:
    """(explore step, train step, task) of every experience: what each step explored and trained."""
    with sqlite3.connect(experiment / "buffer" / "experiences.db") as conn:
        rows = conn.execute("SELECT eid, explore_step, train_step FROM experiences").fetchall()
    return sorted((explored, trained, eid.split("@")[0]) for eid, explored, trained in rows)


@pytest.mark.slow
@pytest.mark.full  # CI's 90 minutes: scripts/test.sh --full (docs/testing.md, 2026-11-29)
def test_a_token_budget_stops_the_run_and_a_larger_one_resumes_it(tmp_path: Path, tiny_model_path: str) -> None:
    from flows.rft import rft

    base = load_recipe("smoke").with_overrides({  # the tiny model (tests/tiny_model.py): the record, not learning
        "checkpoint_root_dir": str(tmp_path / "checkpoints"), "model.model_path": tiny_model_path,
        "buffer.total_steps": 3, "trainer.save_interval": 3,
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
    # CPU seconds by side, measured in the engines' and the trainer's processes; on CPU no GPU seconds
    assert all(u["explore_cpu_s"] > 0 and u["train_cpu_s"] > 0 and u["gpu_s"] == 0 for u in usage.values()), usage
    assert sum(u["sync_cpu_s"] for u in usage.values()) > 0
    assert finished["usage"]["train_cpu_s"] == sum(u["train_cpu_s"] for u in usage.values())

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'checkpoints' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("rft").experiment_id],
                              filter_string=f"tags.`{ROLE_TAG}` = 'main'")
    (continued,) = [r for r in runs if r.info.run_id == finished["mlflow_run_id"]]  # the resume continued it
    assert continued.info.run_id == summary["mlflow_run_id"] and continued.info.status == "FINISHED"
    history = client.get_metric_history(continued.info.run_id, "usage/tokens_sampled")
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert max(m.value for m in history) == finished["usage"]["tokens_sampled"]
    for side in ("explore", "train"):
        cpu_s = max(m.value for m in client.get_metric_history(continued.info.run_id, f"usage/{side}_cpu_s"))
        assert cpu_s > 0 and cpu_s == pytest.approx(finished["usage"][f"{side}_cpu_s"])


def sft_config(root: Path, name: str, model_path: str | None = None) -> ExperimentConfig:
    """An SFT stage on its own: 3 steps of 4 rows (no evaluation, so no engines)."""
    rows = root / "sft.jsonl"
    if root.is_dir():
        rows.write_text("".join(json.dumps({"prompt": f"What is {i} + 3?", "response": f"{i + 3}"}) + "\n" for i in range(8)))
    return load_recipe("smoke").with_overrides({
        "name": name, "checkpoint_root_dir": str(root / "checkpoints"), "mode": "train", "algorithm.algorithm_type": "sft",
        "buffer.batch_size": 4, "buffer.train_batch_size": 4, "buffer.total_steps": 3, "trainer.save_interval": 3,
        "explorer.eval_on_startup": False, "buffer.explorer_input.eval_tasksets": [],
        "buffer.trainer_input.experience_buffer": {"name": "sft", "path": str(rows), "split": "train", "format": {
            "prompt_type": "plaintext", "prompt_key": "prompt", "response_key": "response"}},
        **({"model.model_path": model_path} if model_path else {}),
    })


@pytest.mark.slow
def test_an_sft_stage_stops_at_its_wall_budget_and_resumes_to_the_same_weights(tmp_path: Path, tiny_model_path: str) -> None:
    """SFT trains fixed rows (each step's batch follows from the step), so a resumed run ends with the same
    weights as one that ran through. The tiny model (tests/tiny_model.py): SFT changes its weights too."""
    import torch
    from safetensors.torch import load_file

    from flows.rft import rft

    budgeted = sft_config(tmp_path, "sft-budgeted", tiny_model_path).with_overrides({"budget.max_wall_minutes": 1e-6})  # reached at step 1
    stopped = rft(config=budgeted, return_state=True)
    assert stopped.is_completed() and stopped.name == "BudgetReached", stopped
    exp = budgeted.experiment_dir
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["steps"] == 1 and "budget.max_wall_minutes" in summary["stopped"] and complete_steps(exp) == [1]
    assert summary["usage"]["tokens_trained"] > 0 and summary["usage"]["tokens_sampled"] == 0

    rft(config=budgeted.with_overrides({"budget.max_wall_minutes": None}))
    unbudgeted = sft_config(tmp_path, "sft-unbudgeted", tiny_model_path)
    rft(config=unbudgeted)
    finished = json.loads((exp / "summary.json").read_text())
    assert finished["steps"] == 3 and "stopped" not in finished
    assert sorted(json.loads((exp / "usage.json").read_text())["steps"], key=int) == ["1", "2", "3"]
    assert complete_steps(exp)[-1] == complete_steps(unbudgeted.experiment_dir)[-1] == 3

    def weights(experiment: Path) -> dict[str, torch.Tensor]:
        files = sorted((experiment / "final" / "huggingface").glob("*.safetensors"))
        assert files
        return {k: v for f in files for k, v in load_file(str(f)).items()}

    resumed, straight = weights(exp), weights(unbudgeted.experiment_dir)
    assert resumed.keys() == straight.keys()
    assert all(torch.allclose(resumed[k], straight[k], atol=1e-6) for k in resumed)
