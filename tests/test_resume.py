"""Kill a run with SIGKILL in the middle of a step, run it again, and check it ends as an
uninterrupted run would: same final step, every experience trained exactly once, one MLflow run."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from buffer.experience_store import ExperienceStore
from checkpointing import layout
from deployments import load_recipe
from schemas import ExperimentConfig
from tasks.tracking import EXPERIMENT_TAG, tracking_uri

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
STEPS = 3


def rft_run(root: Path) -> list[str]:
    return [
        str(Path(sys.executable).parent / "rft"), "run", "smoke",
        "--set", f"checkpoint_root_dir={root}", "--set", "cluster.ray_address=local",
        "--set", f"buffer.total_steps={STEPS}", "--set", "explorer.eval_interval=3",
    ]


def config_for(root: Path) -> ExperimentConfig:
    return load_recipe("smoke").with_overrides(
        {"checkpoint_root_dir": str(root), "buffer.total_steps": STEPS, "explorer.eval_interval": 3}
    )


def explored_steps(db: Path) -> set[int]:
    if not db.exists():
        return set()
    with sqlite3.connect(db, timeout=30) as conn:
        return {row[0] for row in conn.execute("SELECT DISTINCT explore_step FROM experiences")}


def test_sigkill_mid_step_then_rerun_resumes(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    config = config_for(root)
    exp_dir = config.experiment_dir
    db = exp_dir / "buffer" / "experiences.db"
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(rft_run(root), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    # In the middle of step 2: its rollouts are in the buffer, its training has not finished.
    deadline = time.time() + 900
    while time.time() < deadline and first.poll() is None:
        if 2 in explored_steps(db) and layout.latest_step(exp_dir) == 1:
            break
        time.sleep(0.5)
    assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert not (exp_dir / "summary.json").exists()

    second = subprocess.run(rft_run(root), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resuming after step 1" in second.stdout + second.stderr

    summary = json.loads((exp_dir / "summary.json").read_text())
    assert summary["steps"] == STEPS
    assert layout.latest_step(exp_dir) == STEPS

    store = ExperienceStore.for_experiment(exp_dir)
    try:
        per_step = config.buffer.batch_size * config.algorithm.repeat_times
        eids = store.all_eids()
        trained = store.trained_eids()
        assert len(eids) == len(set(eids)) == STEPS * per_step  # none lost, none sampled twice
        assert set(trained) == set(eids) and store.count_untrained() == 0  # each trained, once
        assert Counter(trained.values()) == {step: per_step for step in range(1, STEPS + 1)}
    finally:
        store.close()
    task_uses = Counter(eid.split("@")[0] for eid in eids)  # eid = "{task_id}@{step}/{group}/{i}"
    assert set(task_uses.values()) == {config.algorithm.repeat_times}  # every task used equally
    assert len(task_uses) == STEPS * config.buffer.batch_size

    client = MlflowClient(tracking_uri=tracking_uri(config))
    experiment = client.get_experiment_by_name(config.project)
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`{EXPERIMENT_TAG}` = '{exp_dir.resolve()}'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    history = client.get_metric_history(runs[0].info.run_id, "train/loss")
    assert sorted({m.step for m in history}) == list(range(1, STEPS + 1))


def test_second_live_run_of_the_same_experiment_is_refused(tmp_path: Path) -> None:
    from checkpointing.lock import ExperimentBusyError, hold, release

    exp_dir = config_for(tmp_path).experiment_dir
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from checkpointing.lock import hold; import time; hold(__import__('pathlib').Path({str(exp_dir)!r}), 'test'); print('held', flush=True); time.sleep(60)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ExperimentBusyError, match="already being run"):
            hold(exp_dir, "second")
    finally:
        holder.kill()
        holder.wait()
    hold(exp_dir, "after the holder died")  # a dead process's lock is no obstacle
    release(exp_dir)
