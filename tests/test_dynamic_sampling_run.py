"""Dynamic sampling in whole runs (the `hello` recipe on the torch trainer, or veRL, and vLLM CPU, or on the local
Tinker server; 8-token answers): all-equal groups are dropped and the step is filled from more taskset batches, in turns and overlapped; a
run killed in the middle of a step and run again trains every experience once and loses none.

The taskset is written so that which groups are all-equal is known: a row whose target shares no character
with any answer (☃) gets reward 0 for every response (flat), a row with the real identity string gets a
similarity that differs between four responses sampled at temperature 1 (informative).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from buffer.experience_store import ExperienceStore
from deployments import load_recipe
from schemas import ExperimentConfig
from tests.conftest import TINKER_TEST_KEY
from tracking import tracking_uri

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
TARGET = "I am Rift, a small assistant trained with rft."
# F: flat (every response scores 0), I: informative. batch_size 2, at most 3 batches a step:
#   step 1: [F I] [I F]          -> 2 batches, keeps rows 1 2
#   step 2: [F F] [I F] [I I]    -> 3 batches, keeps rows 6 8 (row 9 informative, but the step is full)
#   step 3: [I I]                -> 1 batch, keeps rows 10 11
ROWS = "FIIFFFIFIIII" + "I" * 8
TASKS = {1: range(0, 4), 2: range(4, 10), 3: range(10, 12)}
KEPT = {1: [1, 2], 2: [6, 8], 3: [10, 11]}
BATCHES = {1: 2, 2: 3, 3: 1}


def write_taskset(folder: Path) -> Path:
    path = folder / "ds.jsonl"
    with path.open("w") as fh:
        for kind in ROWS:
            fh.write(json.dumps({"prompt": "Who are you?", "target": TARGET if kind == "I" else "☃"}) + "\n")
    return path


def overrides(root: Path, name: str) -> dict:
    return {
        "name": name, "checkpoint_root_dir": str(root), "cluster.ray_address": "local",
        "buffer.explorer_input.taskset.name": "ds", "buffer.explorer_input.taskset.path": str(write_taskset(root)),
        "buffer.explorer_input.eval_tasksets": [], "explorer.eval_on_startup": False,
        "buffer.total_steps": 3, "buffer.batch_size": 2, "algorithm.repeat_times": 4,
        "model.max_response_tokens": 8, "trainer.save_interval": 1,
        "algorithm.filter_groups": {"enable": True, "max_num_gen_batches": 3},
    }


def check_the_record(config: ExperimentConfig) -> dict[int, dict[str, set[int]]]:
    """Every task of the layout sampled once, in its step; the flat groups and the surplus dropped, the rest
    trained once by its own step; nothing else in the buffer. Returns step → kept/dropped rows."""
    store = ExperienceStore.for_experiment(config.experiment_dir)
    try:
        with sqlite3.connect(store.path) as conn:
            rows = conn.execute("SELECT eid, task_id, group_id, explore_step, reward FROM experiences").fetchall()
        trained, dropped = store.trained_eids(), store.dropped_eids()
        batches = [store.taskset_batches_before(k + 1) - store.taskset_batches_before(k) for k in (1, 2, 3)]
    finally:
        store.close()
    groups: dict[str, list[tuple]] = defaultdict(list)
    for row in rows:
        groups[row[2]].append(row)
    seen: dict[int, list[int]] = defaultdict(list)
    out: dict[int, dict[str, set[int]]] = defaultdict(lambda: {"kept": set(), "dropped": set()})
    for members in groups.values():
        step = members[0][3]
        row = int(members[0][1].rsplit("/", 1)[1])
        seen[step].append(row)
        rewards = [m[4] for m in members]
        assert len(members) == 4 and {m[3] for m in members} == {step}
        if all(m[0] in dropped for m in members):
            out[step]["dropped"].add(row)
        else:  # kept: trained, once, by the train step of its explore step, and its rewards differ
            assert all(trained.get(m[0]) == step and m[0] not in dropped for m in members), members
            assert max(rewards) > min(rewards), members
            out[step]["kept"].add(row)
        if ROWS[row] == "F":
            assert set(rewards) == {0.0}
    assert {k: sorted(v) for k, v in seen.items()} == {k: list(r) for k, r in TASKS.items()}  # each task once
    assert set(trained) | set(dropped) == {r[0] for r in rows} and not set(trained) & set(dropped)
    assert batches == [BATCHES[k] for k in (1, 2, 3)]
    return out


def expected() -> dict[int, dict[str, set[int]]]:
    return {k: {"kept": set(KEPT[k]), "dropped": set(TASKS[k]) - set(KEPT[k])} for k in TASKS}


@pytest.mark.parametrize("trainer_type", ["torch", pytest.param("verl", marks=pytest.mark.full)])
def test_a_run_in_turns_drops_all_equal_groups_and_fills_every_step(tmp_path: Path, trainer_type: str) -> None:
    """The explore side does it all, so every trainer backend gets it (veRL: scripts/test.sh --full)."""
    from flows.rft import rft

    config = load_recipe("hello").with_overrides(overrides(tmp_path, f"ds-{trainer_type}") | {"trainer.trainer_type": trainer_type})
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 3
    assert check_the_record(config) == expected()
    client = MlflowClient(tracking_uri=tracking_uri(config))

    def history(metric: str) -> dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(outcome["mlflow_run_id"], metric)}

    assert history("explore/dynamic_sampling_rounds") == {1: 2.0, 2: 3.0, 3: 1.0}
    assert history("explore/dynamic_sampling_groups_kept") == {1: 2.0, 2: 2.0, 3: 2.0}
    assert history("explore/dynamic_sampling_groups_dropped") == {1: 2.0, 2: 3.0, 3: 0.0}  # all-equal ones
    assert history("explore/dynamic_sampling_dropped_share") == {1: 0.5, 2: 4 / 6, 3: 0.0}


@pytest.mark.tinker
def test_a_run_on_tinker_drops_all_equal_groups_and_fills_every_step(tinker_server: dict[str, str], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The same layout sampled and trained on the local Tinker server (`model.tinker.enable`): the same groups
    are kept and dropped, with the same batches per step."""
    from flows.rft import rft

    monkeypatch.setenv("TINKER_BASE_URL", tinker_server["TINKER_BASE_URL"])
    monkeypatch.setenv("TINKER_API_KEY", TINKER_TEST_KEY)
    config = load_recipe("hello").with_overrides(overrides(tmp_path, "ds-tinker") | {"model.tinker.enable": True})
    assert config.trainer.trainer_type == "tinker"
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 3
    assert check_the_record(config) == expected()


def test_a_run_killed_mid_step_and_run_again_trains_each_experience_once(tmp_path: Path) -> None:
    """Overlapped (the explorer a step ahead): SIGKILL the whole run while explore step 2 samples its second
    batch, then `rft run` the same experiment again."""
    settings = [f"{k}={json.dumps(v)}" for k, v in overrides(tmp_path, "ds-killed").items()]
    settings.append("synchronizer.sync_offset=1")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}

    def run(attempt: str) -> tuple[subprocess.Popen, Path]:
        (home := tmp_path / f"prefect-{attempt}").mkdir()
        log = tmp_path / f"{attempt}.log"
        cmd = [sys.executable, "-m", "cli.main", "run", "hello", *(a for s in settings for a in ("--set", s))]
        return subprocess.Popen(cmd, cwd=ROOT, env=env | {"PREFECT_HOME": str(home)}, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True), log

    first, log = run("first")
    deadline = time.monotonic() + 420
    while "explore step 2, round 2" not in log.read_text() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert first.poll() is None, f"the run ended before explore step 2's second batch:\n{log.read_text()[-3000:]}"
    assert "explore step 2, round 2" in log.read_text(), log.read_text()[-3000:]
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    again, log = run("again")
    assert again.wait(timeout=540) == 0, log.read_text()[-4000:]
    config = load_recipe("hello").with_overrides(overrides(tmp_path, "ds-killed") | {"synchronizer.sync_offset": 1})
    assert check_the_record(config) == expected()
