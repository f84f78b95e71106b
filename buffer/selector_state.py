"""What an adaptive task selector (difficulty_based) has learnt, kept in the experiment folder as JSON.

`buffer/task_selector.json` holds the selector's state after the results of explore step `through_step`, written
after each step's experiences are stored. The experience store is the record behind it: it keeps every step's
groups, dropped ones too, so the state at the start of step N is the saved one brought forward with the results of
the steps after it (a run stopped between storing a step and saving the state). A state saved over other settings
or tasks, or past a store that was rewound (a step at or after N), is rebuilt from step 1 the same way: the state
is a function of the stored results, and a resumed run picks what an uninterrupted one would.

A task's result is the mean over its rollouts of the workflow's `accuracy` (its reward, clipped to [0, 1], where the
workflow records none): Trinity's pass_rate_calculator, on the measure our workflows call right or wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from buffer.experience_store import ExperienceStore
    from buffer.taskset import TasksetReader

STATE_FILE = Path("buffer") / "task_selector.json"
# Settings that change only what is picked, not what is learnt: a resume may change them and keep the state.
PICK_ONLY = {"target_reward", "tau", "do_sample"}


def settings(reader: TasksetReader) -> dict[str, Any]:
    """What the learnt state depends on: the selector's settings (pick-only ones aside) and the tasks."""
    config = reader.picker.config
    ids = hashlib.sha256("\n".join(t.task_id for t in reader.tasks).encode()).hexdigest()
    return {"selector_type": config.selector_type, "feature_keys": list(config.feature_keys),
            "harder_when": config.harder_when, "kwargs": config.kwargs.model_dump(exclude=PICK_ONLY),
            "num_tasks": len(reader.tasks), "task_ids_sha256": ids}


def read_state(experiment_dir: Path) -> dict[str, Any] | None:
    path = experiment_dir / STATE_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError):
        return None  # a torn or unreadable file: rebuilt from the store


def _write_state(experiment_dir: Path, state: dict[str, Any]) -> None:
    path = experiment_dir / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state), encoding="utf-8")
    os.replace(tmp, path)  # whole or not at all


def step_results(reader: TasksetReader, store: ExperienceStore, first: int, last: int) -> dict[int, dict[int, float]]:
    """{explore step: {task index: pass rate}} of steps first..last (module docstring); tasks of other tasksets aside."""
    index_of = {task.task_id: i for i, task in enumerate(reader.tasks)}
    values: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for step, task_id, reward, accuracy in store.task_outcomes(first, last):
        if task_id in index_of:
            value = accuracy if accuracy is not None else min(max(reward, 0.0), 1.0)
            values[step][index_of[task_id]].append(value)
    return {step: {i: sum(v) / len(v) for i, v in tasks.items()} for step, tasks in values.items()}


def _learn(reader: TasksetReader, store: ExperienceStore, first: int, last: int) -> None:
    results = step_results(reader, store, first, last) if first <= last else {}
    for step in range(first, last + 1):
        reader.picker.update(results.get(step, {}))


def restore(reader: TasksetReader, experiment_dir: Path, store: ExperienceStore, step: int) -> str:
    """Bring the reader's selector to the start of explore step `step` (module docstring); returns how, for the log."""
    if not reader.picker.adaptive:
        return ""
    saved = read_state(experiment_dir)
    through = 0
    how = "learnt from the stored results of steps 1 to {last}"
    if saved and saved.get("settings") == settings(reader) and saved.get("through_step", step) < step:
        reader.picker.load_state_dict(saved["state"])
        through = int(saved["through_step"])
        how = f"saved after step {through}" + (", then the stored results of steps {first} to {last}"
                                                if through < step - 1 else "")
    elif saved:
        how = "the saved state does not fit (other settings or tasks, or a rewound store): " + how
    _learn(reader, store, through + 1, step - 1)
    return how.format(first=through + 1, last=step - 1) if step > 1 else "nothing learnt yet"


def record(reader: TasksetReader, experiment_dir: Path, store: ExperienceStore, step: int) -> None:
    """Learn from explore step `step`'s stored results and save the state (after the step's experiences are stored)."""
    if not reader.picker.adaptive:
        return
    _learn(reader, store, step, step)
    _write_state(experiment_dir, {"through_step": step, "settings": settings(reader),
                                  "state": reader.picker.state_dict()})
