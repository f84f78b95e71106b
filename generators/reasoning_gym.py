"""`generator:reasoning_gym`: reasoning-gym's procedural tasks (one dataset a taskset), each scored by its own verifier."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, ClassVar

from pydantic import Field, ValidationInfo, field_validator

from generators.base import GeneratorArgs

# Settings of a reasoning-gym dataset that generator_args sets itself (not in `config`).
REASONING_GYM_OWN = ("seed", "size")


def reasoning_gym_config(dataset: str) -> type:
    """The config dataclass of reasoning-gym dataset `dataset` (ValueError naming the known ones)."""
    from reasoning_gym.factory import DATASETS  # ~1 s to import: only when a reasoning_gym taskset is checked

    if dataset not in DATASETS or dataset == "composite":
        known = sorted(n for n in DATASETS if n != "composite")
        raise ValueError(f"reasoning-gym has no dataset {dataset!r}; its datasets: {', '.join(known)}")
    return DATASETS[dataset][1]


class ReasoningGymArgs(GeneratorArgs):
    """`generator:reasoning_gym`: the procedural tasks of reasoning-gym (countdown, basic_arithmetic, leg_counting,
    ... one dataset a taskset), one a row: `question`, `answer` (one right answer), `dataset`, `index`, `metadata` (JSON,
    to read) and `reasoning_gym` (JSON: dataset, seed, size, config, index: what the reward regenerates the entry from
    to score an answer with the dataset's own verifier, reward `reasoning_gym_reward`).

    `config` holds the dataset's own settings (its difficulty: countdown's min_numbers, max_target, ...), passed to
    its config class and checked by it: a key the class does not have is an error naming it. Entry i of a seed is
    reasoning-gym's item i; the `test` split is the first `test_size` distinct questions, `train` the next
    `train_size` items whose question is not in `test` (a question may repeat in `train` when the dataset has few).
    """

    TRAIN_ONLY: ClassVar[frozenset[str]] = frozenset({"train_size"})

    dataset: str = Field(..., description="The reasoning-gym dataset, e.g. countdown, basic_arithmetic, leg_counting.")
    config: dict[str, Any] = Field({}, description="The dataset's own settings (its config class's fields, e.g. "
                                   "countdown's min_numbers, max_numbers, max_target): the difficulty.")
    seed: int = Field(0, description="Seed of the entries.")
    train_size: int = Field(1000, ge=1, description="Rows of the train split.")
    test_size: int = Field(100, ge=1, description="Rows of the test split (held out).")

    @field_validator("dataset")
    @classmethod
    def _known(cls, dataset: str) -> str:
        reasoning_gym_config(dataset)
        return dataset

    @field_validator("config")
    @classmethod
    def _settings(cls, config: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        import dataclasses

        dataset = info.data.get("dataset")
        if dataset is None:
            return config  # the dataset is already wrong
        config_cls = reasoning_gym_config(dataset)
        fields = [f.name for f in dataclasses.fields(config_cls) if f.name not in REASONING_GYM_OWN]
        for key in config:
            if key in REASONING_GYM_OWN:
                raise ValueError(f"config.{key}: set generator_args.{'seed' if key == 'seed' else 'train_size/test_size'}"
                                 " instead")
            if key not in fields:
                raise ValueError(f"config.{key}: reasoning-gym's {dataset} has no setting {key!r}; its settings "
                                 f"({config_cls.__name__}): {', '.join(fields)}")
        try:
            made = config_cls(**config)
            if hasattr(made, "validate"):
                made.validate()
        except (AssertionError, TypeError, ValueError) as exc:
            raise ValueError(f"config: reasoning-gym's {config_cls.__name__} refuses {config}: {exc}") from None
        return config


@lru_cache(maxsize=16)
def reasoning_gym_dataset(dataset: str, seed: int, size: int, config_json: str) -> Any:
    """reasoning-gym's dataset `dataset` made with these settings (its items are item i of Random(seed + i))."""
    import reasoning_gym

    return reasoning_gym.create_dataset(dataset, seed=seed, size=size, **json.loads(config_json))


@lru_cache(maxsize=4096)
def reasoning_gym_entry(source: str) -> tuple[Any, dict[str, Any]]:
    """(dataset, entry) of a row's `reasoning_gym` column (JSON: dataset, seed, size, config, index): the entry
    regenerated as the generator made it, what the dataset's own verifier (`score_answer`) reads."""
    spec = json.loads(source)
    ds = reasoning_gym_dataset(spec["dataset"], spec["seed"], spec["size"], json.dumps(spec["config"], sort_keys=True))
    return ds, ds[spec["index"]]


@lru_cache(maxsize=8)
def _reasoning_gym_splits(args_json: str) -> dict[str, list[dict[str, Any]]]:
    args = ReasoningGymArgs.model_validate_json(args_json)
    size = 50 * (args.test_size + args.train_size) + 10_000  # the draws allowed; also the dataset's virtual size
    config_json = json.dumps(args.config, sort_keys=True)
    ds = reasoning_gym_dataset(args.dataset, args.seed, size, config_json)
    test: list[dict[str, Any]] = []
    train: list[dict[str, Any]] = []
    held_out: set[str] = set()
    for index in range(size):
        try:
            entry = ds[index]
        except Exception as exc:  # noqa: BLE001 - e.g. countdown finding no expression within the target's range
            raise ValueError(f"generator:reasoning_gym: {args.dataset} could not make entry {index} with config "
                             f"{args.config}: {exc}") from exc
        question = entry["question"]
        if len(test) < args.test_size:
            if question in held_out:
                continue
            held_out.add(question)
            split = test
        elif question in held_out:
            continue
        else:
            split = train
        source = {"dataset": args.dataset, "seed": args.seed, "size": size, "config": args.config, "index": index}
        split.append({
            "question": question, "answer": str(entry["answer"]), "dataset": args.dataset, "index": index,
            "metadata": json.dumps(entry.get("metadata", {}), default=str),
            "reasoning_gym": json.dumps(source, sort_keys=True),
        })
        if len(train) == args.train_size:
            return {"test": test, "train": train}
    raise ValueError(f"generator:reasoning_gym found {len(test)} distinct test questions and {len(train)} train rows in "
                     f"{size} entries of {args.dataset}, {args.test_size} + {args.train_size} needed: allow more (a harder "
                     "config) or ask for fewer")


def reasoning_gym(args: ReasoningGymArgs, split: str) -> list[dict[str, Any]]:
    """Rows {"question", "answer", "dataset", "index", "metadata", "reasoning_gym"} of the reasoning-gym taskset's
    `split` (reward reasoning_gym_reward scores an answer with the dataset's own verifier)."""
    return _reasoning_gym_splits(args.model_dump_json())[split]
