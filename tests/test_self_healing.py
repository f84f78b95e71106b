"""A run heals itself: the trainer is SIGKILLed while it trains, the vLLM engine while it loads the
new weights (sync), and the MLflow server is stopped for most of a step, and the run still ends with
its 2 steps, every experience trained exactly once, every step's metrics in MLflow once, and the
restarts counted. (An engine that dies while exploring: tests/test_policy_contract.py.)

One run does it all (each revival costs an engine or trainer start). A killer thread watches the
processes of the run's Ray actors: Ray titles a worker `ray::Class.method` while it runs that method,
which tells the phase (`TrainerActor.train_step`: train; `VLLMEngine.load_weights`: sync). MLflow is started
again as soon as the run has kept writes in its spool: beside another pytest worker, step 2's 1.5 s of training
passed unseen between two looks at the titles, and a server start took ~25 s (2026-12-02).
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from buffer.experience_store import ExperienceStore
from checkpointing.layout import log_dir
from deployments import load_recipe
from tests.mlflow_server import MlflowServer
from tracking import SPOOL

pytestmark = [pytest.mark.slow, pytest.mark.full]  # ~3.5 min on 2 cores: scripts/test.sh --full
ENGINE, TRAINER = "ray::VLLMEngine", "ray::TrainerActor"
STEPS = 2

# (the actor title that must be running, or SPOOLED; then what is done): an actor's title is killed, or
# "mlflow stop" / "mlflow start".
SPOOLED = "writes kept"  # the run's MLflow spool exists: it found the server down and kept what it wrote
PLAN: list[tuple[str | None, str]] = [
    (f"{TRAINER}.train_step", TRAINER),  # train, step 1 (no checkpoint yet: trained again from scratch)
    (f"{ENGINE}.load_weights", ENGINE),  # sync, step 1: the sync task's retry revives the engine
    (None, "mlflow stop"),  # step 1's checkpoint and metrics are logged while it is down
    (SPOOLED, "mlflow start"),  # the kept writes are replayed once it answers, while step 2 runs
]


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def title(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


class Killer(threading.Thread):
    """Works through PLAN while the run goes on; `done` lists what it did."""

    def __init__(self, mlflow: MlflowServer, experiment_dir: Path) -> None:
        super().__init__(daemon=True, name="killer")
        self.mlflow, self.done, self.stop = mlflow, [], threading.Event()
        self.experiment_dir = experiment_dir
        self.error: BaseException | None = None  # a thread's exception is otherwise only a warning

    def run(self) -> None:
        try:
            self.work_through_plan()
        except BaseException as exc:
            self.error = exc
            raise

    def work_through_plan(self) -> None:
        actors: dict[int, str] = {}
        refreshed = 0.0
        for trigger, action in PLAN:
            while trigger == SPOOLED and not self.stop.is_set() and not (log_dir(self.experiment_dir) / SPOOL).exists():
                time.sleep(0.2)
            while trigger not in (None, SPOOLED) and not self.stop.is_set():
                if time.monotonic() - refreshed > 0.5:  # actors come and go with revivals
                    actors = {pid: t for pid in descendants(os.getpid()) if (t := title(pid)).startswith("ray::")}
                    refreshed = time.monotonic()
                titles = {pid: title(pid) for pid in actors}
                if any(t == trigger for t in titles.values()):
                    break
                time.sleep(0.005)
            if self.stop.is_set():
                return
            if action.startswith("mlflow "):
                getattr(self.mlflow, action.split()[1])()
                self.done.append(action)
                continue
            victims = [pid for pid, t in titles.items() if t.startswith(action)]
            if victims:
                os.kill(victims[0], signal.SIGKILL)
                self.done.append(f"{action} killed during {trigger}")
                refreshed = 0.0
                time.sleep(1.0)  # the next trigger is another phase


def test_dead_engines_trainers_and_mlflow_outage_heal(tmp_path: Path) -> None:
    from flows.rft import rft

    mlflow = MlflowServer(tmp_path)
    mlflow.start()
    root = tmp_path / "checkpoints"
    config = load_recipe("smoke").with_overrides({
        "name": "healing",
        "checkpoint_root_dir": str(root),
        "cluster.ray_address": "local",
        "monitor.tracking_uri": mlflow.uri,
        "buffer.total_steps": STEPS,
        "explorer.eval_on_startup": False,
    })
    killer = Killer(mlflow, config.experiment_dir)
    killer.start()
    try:
        started = time.monotonic()
        outcome = rft(config=config)
        print(f"run with {len(killer.done)} faults: {time.monotonic() - started:.0f} s")
    finally:
        killer.stop.set()
        killer.join(timeout=10)
        if mlflow.proc is None:
            mlflow.start()

    try:
        assert killer.error is None, f"the killer failed at {len(killer.done)} of {len(PLAN)}: {killer.error!r}"
        assert killer.done == [
            action if action.startswith("mlflow ") else f"{action} killed during {trigger}" for trigger, action in PLAN
        ], killer.done
        assert outcome[config.name]["steps"] == STEPS

        store = ExperienceStore.for_experiment(config.experiment_dir)
        try:
            eids, trained = store.all_eids(), store.trained_eids()
        finally:
            store.close()
        per_step = config.buffer.batch_size * config.algorithm.repeat_times
        assert len(eids) == len(set(eids)) == STEPS * per_step  # nothing lost, nothing sampled twice
        assert sorted(Counter(trained.values()).items()) == [(s, per_step) for s in range(1, STEPS + 1)]  # each trained once

        client = MlflowClient(tracking_uri=mlflow.uri)
        run_id = outcome[config.name]["mlflow_run_id"]
        assert client.get_run(run_id).info.status == "FINISHED"
        for key in ("explore/reward_mean", "train/loss", "time/sync_s"):
            assert sorted(m.step for m in client.get_metric_history(run_id, key)) == list(range(1, STEPS + 1)), key
        restarts = {key: max(client.get_metric_history(run_id, key), key=lambda m: m.step).value
                    for key in ("engine_restarts", "trainer_restarts")}
        assert restarts == {"engine_restarts": 1.0, "trainer_restarts": 1.0}
        assert not (log_dir(config.experiment_dir) / SPOOL).exists()
    finally:
        mlflow.stop()
        shutil.rmtree(root, ignore_errors=True)  # ~1.6 GB per checkpoint
