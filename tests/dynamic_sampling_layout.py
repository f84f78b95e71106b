"""The dynamic-sampling layout whole-run tests share (tests/test_dynamic_sampling_run.py, and
tests/test_tinker.py, whose one server runs it on Tinker): a taskset whose all-equal groups are known,
the settings that run it, and the check of what the buffer holds afterwards.

A row whose target shares no character with any answer (☃) gets reward 0 for every response (flat), a
row with the real identity string gets a similarity that differs between four responses sampled at
temperature 1 (informative).
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from pathlib import Path

from buffer.experience_store import ExperienceStore
from schemas import ExperimentConfig

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
