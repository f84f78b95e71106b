"""The experience pipeline's operators (Trinity-RFT's built-ins, `data_processor.experience_pipeline.operators`):
each maps an explore step's experiences to those kept, with its metrics. They run in order on the explorer, after
scoring and before the advantages (tasks/explore.py), so a reshaped reward is what the advantages see.

    reward_filter          keep reward ≥ threshold (default 0)
    reward_std_filter      keep the groups whose rewards' standard deviation is above threshold (default 0)
    invalid_reward_filter  drop NaN rewards
    reward_shaping_mapper  reward ∘= weight · stat, for each {stats_key, op_type ADD|SUB|MUL|DIV, weight}; the stat is
                           the experience's info[stats_key], else its reward_breakdown[stats_key]
    pass_rate_calculator   keeps all; metric pass_rate (mean reward per task, averaged) and pass_rate_zero/one (the
                           share of tasks no sample / every sample solved)
    mask_response_truncated keeps all; a response the engine cut at its token limit (finish_reason "length") gets an
                           all-zero response mask, so it adds nothing to the loss (DAPO's overlong filtering). Its
                           reward still counts in its group's advantage; metric masked_truncated_count
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from buffer.experience import Experience
from schemas.data_processor import OPERATOR_ARGS

Operator = Callable[[list[Experience], dict[str, Any]], tuple[list[Experience], dict[str, float]]]
OPERATORS: dict[str, Operator] = {}  # their names and arguments' defaults: schemas/data_processor.py OPERATOR_ARGS


def operator(name: str) -> Callable[[Operator], Operator]:
    def register(fn: Operator) -> Operator:
        if name not in OPERATOR_ARGS:
            raise ValueError(f"operator {name!r} has no arguments model in schemas/data_processor.py OPERATOR_ARGS")
        OPERATORS[name] = fn
        return fn

    return register


@operator("reward_filter")
def reward_filter(exps: list[Experience], args: dict[str, Any]) -> tuple[list[Experience], dict[str, float]]:
    kept = [e for e in exps if e.reward >= float(args["threshold"])]
    return kept, {"filtered_count": float(len(exps) - len(kept))}


@operator("reward_std_filter")
def reward_std_filter(exps: list[Experience], args: dict[str, Any]) -> tuple[list[Experience], dict[str, float]]:
    groups: dict[str, list[Experience]] = defaultdict(list)
    for e in exps:
        groups[e.group_id].append(e)
    kept = [e for g in groups.values() if len(g) > 1 and statistics.pstdev([x.reward for x in g]) > float(args["threshold"])
            for e in g]
    return kept, {"filtered_count": float(len(exps) - len(kept))}


@operator("invalid_reward_filter")
def invalid_reward_filter(exps: list[Experience], args: dict[str, Any]) -> tuple[list[Experience], dict[str, float]]:
    kept = [e for e in exps if not math.isnan(e.reward)]
    return kept, {"filtered_count": float(len(exps) - len(kept))}


_OPS: dict[str, Callable[[float, float], float]] = {
    "ADD": lambda r, s: r + s, "SUB": lambda r, s: r - s, "MUL": lambda r, s: r * s,
    "DIV": lambda r, s: r / s if s != 0 else r,
}


@operator("reward_shaping_mapper")
def reward_shaping_mapper(exps: list[Experience], args: dict[str, Any]) -> tuple[list[Experience], dict[str, float]]:
    out, diffs = [], []
    for e in exps:
        reward = e.reward
        for rule in args["reward_shaping_configs"]:
            key = rule.get("stats_key")
            stat = e.info.get(key, e.reward_breakdown.get(key)) if key else None
            if stat is not None:
                reward = _OPS[rule.get("op_type", "ADD")](reward, float(rule.get("weight", 1.0)) * float(stat))
        diffs.append(reward - e.reward)
        out.append(replace(e, reward=reward, reward_breakdown={**e.reward_breakdown, "shaped": reward - e.reward}))
    if not diffs:
        return out, {}
    return out, {"reward_diff/mean": sum(diffs) / len(diffs), "reward_diff/min": min(diffs), "reward_diff/max": max(diffs)}


@operator("pass_rate_calculator")
def pass_rate_calculator(exps: list[Experience], args: dict[str, Any]) -> tuple[list[Experience], dict[str, float]]:
    by_task: dict[str, list[float]] = defaultdict(list)
    for e in exps:
        by_task[e.task_id].append(e.reward)
    rates = [sum(r) / len(r) for r in by_task.values()]
    if not rates:
        return exps, {}
    return exps, {"pass_rate": sum(rates) / len(rates), "pass_rate_zero": sum(r <= 0 for r in rates) / len(rates),
                  "pass_rate_one": sum(r >= 1 for r in rates) / len(rates)}


@operator("mask_response_truncated")
def mask_response_truncated(exps: list[Experience], args: dict[str, Any]) -> tuple[list[Experience], dict[str, float]]:
    out = [replace(e, response_mask=[0] * len(e.response_token_ids)) if e.info.get("finish_reason") == "length" else e
           for e in exps]
    return out, {"masked_truncated_count": float(sum(e.info.get("finish_reason") == "length" for e in exps))}


def run_pipeline(operators: list[tuple[str, dict[str, Any]]], exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
    """`exps` through each (name, args) in order; metrics named `pipeline/<operator>/<metric>`."""
    metrics: dict[str, float] = {}
    for name, args in operators:
        exps, found = OPERATORS[name](exps, {**OPERATOR_ARGS[name], **args})
        metrics |= {f"pipeline/{name}/{k}": float(v) for k, v in found.items()}
    return exps, metrics
