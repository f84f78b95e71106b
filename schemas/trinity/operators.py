"""Trinity-RFT's experience operators that are settings here, or not built (the only place their names live).

Read from Trinity-RFT main's EXPERIENCE_OPERATORS registry (trinity/buffer/operators/__init__.py) and the classes it
points to. The operators this project runs as operators (reward_filter, reward_std_filter, invalid_reward_filter,
reward_shaping_mapper, pass_rate_calculator, mask_response_truncated) are in schemas/data_processor.py and
buffer/operators.py; `data_juicer` is refused there (Data-Juicer is not a dependency).

`dapo_dynamic_sampling` (Trinity's DAPODynamicSamplingFilter) keeps a task's group only when some but not all of its
responses are correct (metric `accuracy` above `correct_threshold`, default 0) and drops the others. That is
`algorithm.filter_groups` here with metric `accuracy` (whose values are 0 or 1, so "some but not all above a threshold
in [0, 1)" is "not all equal"), and `max_num_gen_batches: 1` unless set: Trinity's operator drops those groups and
samples no more tasks, and so does one round here. Raise `max_num_gen_batches` to sample more tasks until the step has
`buffer.batch_size` groups that differ (the DAPO paper's dynamic sampling). Dynamic sampling runs before the experience
pipeline here, so the operator maps only where every operator before it neither drops experiences nor changes rewards
(NEUTRAL); otherwise it is refused naming the order. `map_operators` rewrites it (noted in `derived`), applied with the
aliases (schemas/trinity/aliases.py); `NOT_BUILT` says why the rest are refused (schemas/rules.py).
"""

from __future__ import annotations

from typing import Any

from schemas.base import ALIAS

DAPO_DYNAMIC_SAMPLING = "dapo_dynamic_sampling"
MASK_TRUNCATED = "mask_response_truncated"
# Operators that keep every experience and its reward: dynamic sampling may follow them (it runs first here).
NEUTRAL = (MASK_TRUNCATED, "pass_rate_calculator")
# Trinity's DAPODynamicSamplingFilter's arguments and their defaults.
DAPO_ARGS = {"metric_key": "accuracy", "correct_threshold": 0.0}

_COD = ("Trinity's Connect-the-Dots research operator: it reads per-episode fields (exp_type, task_rewards, hint "
        "indices) that only its own research workflows write, which are not built here")
NOT_BUILT: dict[str, str] = {
    "cod_advantage_fn": _COD,
    "cod_overwrite_reward_with_returns": _COD,
    DAPO_DYNAMIC_SAMPLING: "it is algorithm.filter_groups here (metric accuracy); a config read as data maps it there "
                           "(docs/trinity-parity.md); set algorithm.filter_groups instead",
}


def map_operators(data: dict[str, Any], notes: dict[str, str]) -> list[tuple[str, str]]:
    """Take `dapo_dynamic_sampling` out of raw config data's experience pipeline into `algorithm.filter_groups` (module
    docstring). Returns the problems as (path, why); a refused operator is left out of the data too."""
    processor = data.get("data_processor")
    pipeline = processor.get("experience_pipeline") if isinstance(processor, dict) else None
    operators = pipeline.get("operators") if isinstance(pipeline, dict) else None
    if not isinstance(operators, list) or not any(_name(op) == DAPO_DYNAMIC_SAMPLING for op in operators):
        return []
    base = "data_processor.experience_pipeline.operators"
    problems: list[tuple[str, str]] = []
    kept: list[Any] = []
    for i, op in enumerate(operators):
        if _name(op) != DAPO_DYNAMIC_SAMPLING:
            kept.append(op)
            continue
        path = f"{base}.{i}"
        found = _dapo_problems(op, kept, path)
        if not found:
            found = _filter_groups(data, op.get("args") or {}, path, notes)
        problems += found
    pipeline["operators"] = kept
    return problems


def _name(op: Any) -> Any:
    return op.get("name") if isinstance(op, dict) else getattr(op, "name", None)


def _dapo_problems(op: dict[str, Any], before: list[Any], path: str) -> list[tuple[str, str]]:
    args = op.get("args") or {}
    if not isinstance(args, dict):
        return [(f"{path}.args", f"{args!r}: a mapping of {sorted(DAPO_ARGS)}")]
    problems = [(f"{path}.args.{key}", f"{DAPO_DYNAMIC_SAMPLING!r} has no argument {key!r}; its arguments: "
                 f"{sorted(DAPO_ARGS)}") for key in sorted(set(args) - set(DAPO_ARGS))]
    metric = args.get("metric_key", DAPO_ARGS["metric_key"])
    if metric != "accuracy":
        problems.append((f"{path}.args.metric_key", f"{metric!r}: dynamic sampling here keeps the groups whose value "
                         "differs, which is Trinity's 'some but not all above correct_threshold' for 0-or-1 values: the "
                         "workflows' accuracy; use metric_key accuracy"))
    threshold = args.get("correct_threshold", DAPO_ARGS["correct_threshold"])
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold < 1:
        problems.append((f"{path}.args.correct_threshold", f"{threshold!r}: accuracy here is 0 or 1, so a group is "
                         "split between correct and wrong for a threshold in [0, 1) only"))
    moved = [_name(o) for o in before if _name(o) not in NEUTRAL]
    if moved:
        problems.append((f"{path}.name", f"{DAPO_DYNAMIC_SAMPLING!r} comes after {', '.join(map(repr, moved))}, which "
                         "drop experiences or change rewards; dynamic sampling (algorithm.filter_groups) runs before the "
                         "experience pipeline here: put it first"))
    return problems


def _filter_groups(data: dict[str, Any], args: dict[str, Any], path: str, notes: dict[str, str]) -> list[tuple[str, str]]:
    if "stage_name" in data and "algorithm" not in data:  # a stage's own section would replace the base's whole
        return [(f"{path}.name", f"{DAPO_DYNAMIC_SAMPLING!r} is algorithm.filter_groups here, and this stage has no "
                 "algorithm section of its own (one would replace the base's): give it one, or set it in the base")]
    algorithm = data.setdefault("algorithm", {})
    if not isinstance(algorithm, dict):  # a section object (a recipe in Python): it says what it wants itself
        return [(f"{path}.name", NOT_BUILT[DAPO_DYNAMIC_SAMPLING])]
    groups = algorithm.setdefault("filter_groups", {})
    if not isinstance(groups, dict):
        return [(f"{path}.name", NOT_BUILT[DAPO_DYNAMIC_SAMPLING])]
    problems = []
    for key, value in (("enable", True), ("metric", "accuracy")):
        if groups.get(key, value) != value:
            problems.append((f"{path}.name", f"{DAPO_DYNAMIC_SAMPLING!r} is algorithm.filter_groups with {key} "
                             f"{value!r} here, which contradicts algorithm.filter_groups.{key}: {groups[key]!r}"))
    if problems:
        return problems
    groups["enable"], groups["metric"] = True, "accuracy"
    why = (f"{ALIAS}{path}: Trinity's {DAPO_DYNAMIC_SAMPLING} (keep a group whose responses are neither all correct nor "
           f"all wrong, by accuracy above {args.get('correct_threshold', 0.0)})")
    notes["algorithm.filter_groups.enable"] = why
    notes["algorithm.filter_groups.metric"] = why
    if "max_num_gen_batches" not in groups:
        groups["max_num_gen_batches"] = 1
        notes["algorithm.filter_groups.max_num_gen_batches"] = (
            f"{ALIAS}{path}: Trinity's operator drops the groups and samples no more tasks, as one round does; raise "
            "it to sample more tasks until the step is full (the DAPO paper's dynamic sampling)")
    return []


def ensure_first(data: dict[str, Any], name: str, notes: dict[str, str], why: str) -> None:
    """Put operator `name` (without arguments) first in raw config data's experience pipeline unless it is there; a
    pipeline this makes does not save its input (Trinity's workflow does it without a pipeline)."""
    processor = data.setdefault("data_processor", {})
    if not isinstance(processor, dict):
        return
    pipeline = processor.get("experience_pipeline")
    if pipeline is None:
        pipeline = processor["experience_pipeline"] = {"save_input": False}
        notes["data_processor.experience_pipeline.save_input"] = f"{ALIAS}{why} (a pipeline of its own: nothing saved)"
    if not isinstance(pipeline, dict):
        return
    operators = pipeline.setdefault("operators", [])
    if isinstance(operators, list) and not any(_name(op) == name for op in operators):
        operators.insert(0, {"name": name})
        notes["data_processor.experience_pipeline.operators.0"] = f"{ALIAS}{why}"
