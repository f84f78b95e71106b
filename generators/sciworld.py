"""`generator:sciworld`: variations of ScienceWorld's own train and test sets (workflow `sciworld`)."""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any, ClassVar

from pydantic import Field, field_validator

from generators.base import GeneratorArgs


class SciWorldArgs(GeneratorArgs):
    """`generator:sciworld`: ScienceWorld tasks (workflow `sciworld`), one a row: `task_name`, `variation` (ScienceWorld's
    variation number of that task), `simplification`.

    The split is ScienceWorld's own: `train` rows are variations of its train set, `test` rows variations of its test
    set (never the same variation), the first `train_per_task` / `test_per_task` of each task's list shuffled by
    `seed`. Listing a task's variations starts ScienceWorld's simulator (Java) once per taskset.
    """

    TRAIN_ONLY: ClassVar[frozenset[str]] = frozenset({"train_per_task"})

    seed: int = Field(0, description="Seed of which variations are taken (each task's list is shuffled by it).")
    tasks: list[str] = Field(["find-living-thing", "find-non-living-thing", "find-plant"], min_length=1,
                             description="ScienceWorld task names (its task list: boil, melt, find-animal, ...).")
    train_per_task: int = Field(10, ge=1, description="Variations of each task in the train split (at most its train set).")
    test_per_task: int = Field(3, ge=1, description="Variations of each task in the test split (at most its test set).")
    simplification: str = Field("easy", description="ScienceWorld's simplifications, e.g. 'easy' (teleport, open doors, "
                                "self-watering flower pots, no electrical actions) or '' for none, or a comma list.")

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, tasks: list[str]) -> list[str]:
        try:
            from scienceworld.constants import ID2TASK
        except ImportError:  # checked when the rows are made
            return tasks
        known = sorted(ID2TASK.values())
        unknown = [t for t in tasks if t not in known]
        if unknown:
            raise ValueError(f"unknown ScienceWorld task(s) {unknown}; its tasks: {', '.join(known)}")
        if len(set(tasks)) != len(tasks):
            raise ValueError(f"a task is listed twice: {tasks}")
        return tasks


@lru_cache(maxsize=8)
def sciworld_variations(tasks: tuple[str, ...]) -> dict[str, tuple[list[int], list[int]]]:
    """{task: (its train variations, its test variations)}, ScienceWorld's own split (starts its simulator, Java)."""
    from scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv("")
    try:
        out = {}
        for task in tasks:
            env.load(task, 0, "")
            out[task] = (list(env.get_variations_train()), list(env.get_variations_test()))
        return out
    finally:
        env.close()


@lru_cache(maxsize=8)
def _sciworld_splits(args_json: str) -> dict[str, list[dict[str, Any]]]:
    args = SciWorldArgs.model_validate_json(args_json)
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for task, (train, test) in sciworld_variations(tuple(args.tasks)).items():
        for split, variations, n in (("train", train, args.train_per_task), ("test", test, args.test_per_task)):
            chosen = sorted(variations)
            random.Random(f"{args.seed}/{task}/{split}").shuffle(chosen)
            splits[split] += [{"task_name": task, "variation": v, "simplification": args.simplification}
                              for v in chosen[:n]]
    for split, rows in splits.items():  # any prefix (test[:4]) mixes the tasks
        random.Random(f"{args.seed}/{split}").shuffle(rows)
    return splits


def sciworld(args: SciWorldArgs, split: str) -> list[dict[str, Any]]:
    """Rows {"task_name", "variation", "simplification"} of the sciworld taskset's `split`: variations of ScienceWorld's
    own train or test set (workflow sciworld)."""
    return _sciworld_splits(args.model_dump_json())[split]
