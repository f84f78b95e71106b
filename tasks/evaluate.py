"""Evaluate: run an eval taskset on the engines and score it (nothing enters the training buffer).

What a user reads (`eval_metrics`, the same for every taskset and workflow):
  strict           answers correct in the form the prompt asks for (math: inside \\boxed{});
                   a workflow that scores no `strict` counts its reward's `accuracy`
  lenient          answers correct wherever they are (math: the last number / expression)
  format           answers in the required form (math: in \\boxed{}), right or wrong
  accuracy         what the reward counts as correct (math: strict with require_boxed, else lenient)
  reward_mean, response_length (tokens), truncated (share cut off at max_tokens)
  mean@k, pass@k   with the taskset's repeat_times k > 1: strict averaged over the k samples of a
                   task, and the share of tasks with at least one strict answer
  tasks_failed, tasks_timed_out, prompts_too_long
                   tasks with no answer: their workflow failed (timed_out: ran past
                   explorer.max_timeout) on every attempt, or their prompt was over
                   model.max_prompt_tokens

Every rate above (strict, lenient, format, accuracy, mean@k, pass@k) is over every task of the
taskset: a task with no answer counts as wrong, so a task that fails or times out never raises a
score. reward_mean, response_length and truncated describe the answers there are.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from buffer.experience import Experience
from buffer.taskset import load_taskset
from schemas import ExperimentConfig, TasksetConfig
from tasks.failures import transient_only
from tasks.rollouts import run_workflows
from workflows.multi_turn import episode_stats

# The metrics shown first, in this order (any other metric follows, sorted).
# first in the stage table; success_rate and steps_per_episode: multi-turn episodes (workflows.multi_turn.episode_stats)
HEADLINE = ("strict", "lenient", "format", "accuracy", "success_rate", "steps_per_episode", "reward_mean", "response_length",
            "truncated")
MEASURES = ("strict", "lenient", "format")
EVAL_BATCH = 64
PROGRESS_EVERY_S = 30.0  # how often a run's log says how far an evaluation has got


def eval_metrics(experiences: Sequence[Experience], repeat_times: int = 1, tasks: int | None = None,
                 failed: int = 0, too_long: int = 0, timed_out: int = 0) -> dict[str, float]:
    """The evaluation metrics of scored experiences (module docstring); pure, for any workflow. `tasks`: how many
    the taskset has (default: those with experiences); the rates are over all of them."""
    n = max(len(experiences), 1)
    by_task: dict[str, list[Experience]] = defaultdict(list)
    for exp in experiences:
        by_task[exp.task_id].append(exp)
    total = max(tasks if tasks is not None else len(by_task), 1)

    def score(exp: Experience, key: str) -> float:
        if key == "strict" and key not in exp.reward_breakdown:
            return exp.reward_breakdown.get("accuracy", 0.0)
        return exp.reward_breakdown.get(key, 0.0)

    def over_tasks(key: str) -> float:
        """Each answered task's mean over its samples, summed, over every task (one with no answer adds 0)."""
        return sum(sum(score(e, key) for e in exps) / len(exps) for exps in by_task.values()) / total

    scored = {"strict", *(k for e in experiences for k in e.reward_breakdown if k in MEASURES)}
    metrics = {key: over_tasks(key) for key in MEASURES if key in scored}
    metrics |= {
        "accuracy": over_tasks("accuracy"),
        "reward_mean": sum(e.reward for e in experiences) / n,
        "response_length": sum(len(e.response_token_ids) for e in experiences) / n,
        "truncated": sum(e.info.get("finish_reason") == "length" for e in experiences) / n,
        "tasks": float(tasks if tasks is not None else len(by_task)),
        "tasks_failed": float(failed),
        "tasks_timed_out": float(timed_out),
        "prompts_too_long": float(too_long),
        **episode_stats(list(experiences)),  # turns per episode and success rate of multi-turn workflows
    }
    if repeat_times > 1:
        metrics[f"mean@{repeat_times}"] = over_tasks("strict")
        metrics[f"pass@{repeat_times}"] = sum(max(score(e, "strict") for e in exps) >= 1.0
                                              for exps in by_task.values()) / total
    return metrics


def eval_rows(experiences: Sequence[Experience]) -> list[dict[str, Any]]:
    """One row per task for the eval table: its measures averaged over its samples, and a response."""
    by_task: dict[str, list[Experience]] = defaultdict(list)
    for exp in experiences:
        by_task[exp.task_id].append(exp)
    rows = []
    for task_id, exps in by_task.items():
        metrics = eval_metrics(exps)
        rows.append({
            "task_id": task_id,
            **{k: metrics[k] for k in (*MEASURES, "accuracy") if k in metrics},
            "reward": metrics["reward_mean"],
            "gold": str(exps[0].info.get("gold", "")),
            "response": exps[0].response_text[-300:],
        })
    return rows


def evaluate_tasks(config: ExperimentConfig, taskset: TasksetConfig, step: int,
                   on_task_done: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run one eval taskset on the policy's running engines: {"name", "metrics", "rows"}; `on_task_done(done,
    total)` after each task."""
    tasks = load_taskset(taskset)
    repeat = taskset.repeat_times or 1
    # Enough workflows at once that an engine call holds ~EVAL_BATCH sequences: greedy evaluation samples
    # one per task, and 8 at a time leave a CPU engine reading its weights for few tokens (~2x slower).
    runners = max(config.explorer.runner_per_model, EVAL_BATCH // repeat)
    result = run_workflows(config, tasks, step, repeat, runners, on_task_done=on_task_done)
    metrics = eval_metrics(result.experiences, repeat, tasks=len(tasks), failed=len(result.failures),
                           too_long=len(result.too_long), timed_out=sum(f.timed_out for f in result.failures))
    return {"name": taskset.name, "metrics": metrics, "rows": eval_rows(result.experiences)}


@task(name="evaluate-taskset", retries=1, retry_delay_seconds=5, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def evaluate_taskset(config: ExperimentConfig, index: int, step: int) -> dict:
    """Returns {"name", "metrics": {...}, "rows": [per-task results]} for eval taskset `index`."""
    taskset = config.buffer.explorer_input.eval_tasksets[index]
    result = evaluate_tasks(config, taskset, step, on_task_done=ProgressLog(f"evaluating {taskset.name} at step {step}"))
    m = result["metrics"]
    get_run_logger().info(
        "eval %s at step %d: strict %.3f, lenient %.3f, format %.3f on %d tasks",
        taskset.name, step, m["strict"], m.get("lenient", math.nan), m.get("format", math.nan), int(m["tasks"]),
    )
    return result


class ProgressLog:
    """An `on_task_done` that logs "<what>: <done> of <total> tasks" at most every PROGRESS_EVERY_S seconds, so
    that an evaluation of several minutes shows in the run's log (and the Prefect UI) how far it has got."""

    def __init__(self, what: str, every_s: float = PROGRESS_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what, self.every_s, self.clock = what, every_s, clock
        self.started = self.last = clock()
        self.logger = get_run_logger()  # here, in the task's context: the calls come from runner threads
        self.lock = threading.Lock()

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        with self.lock:
            if now - self.last < self.every_s or done >= total:  # the last is the result's own line
                return
            self.last = now
        self.logger.info("%s: %d of %d tasks, %.1f min", self.what, done, total, (now - self.started) / 60)


# -- before and after, side by side ---------------------------------------------------------------


def metric_order(*metric_sets: dict[str, float] | None) -> list[str]:
    """The metrics of any of the sets: HEADLINE first, then mean@k/pass@k, then the rest."""
    keys = {k for m in metric_sets if m for k in m}
    sampled = sorted(k for k in keys if "@" in k)
    return [k for k in HEADLINE if k in keys] + sampled + sorted(keys - set(HEADLINE) - set(sampled))


def _cell(metrics: dict[str, float] | None, key: str) -> str:
    if not metrics or key not in metrics:
        return "–"
    value = metrics[key]
    return f"{value:.1f}" if key == "response_length" else f"{value:.0f}" if key.startswith("tasks") else f"{value:.3f}"


def _change(before: dict[str, float] | None, after: dict[str, float] | None, key: str) -> str:
    if not before or not after or key not in before or key not in after or key.startswith("tasks"):
        return ""
    delta = after[key] - before[key]
    return f"{delta:+.1f}" if key == "response_length" else f"{delta:+.3f}"


def before_label(stage_index: int) -> str:
    """The column of a stage's metrics at its start: the first stage starts from the base model, a later one
    from the stage before it."""
    return "before training" if stage_index == 0 else "before this stage"


def comparison_rows(before: dict[str, float] | None, after: dict[str, float] | None, after_label: str = "after",
                    before_label: str = "before training") -> list[dict[str, str]]:
    """Rows {metric, <before_label>, <after_label>, change} of one taskset's metrics."""
    return [
        {"metric": k, before_label: _cell(before, k), after_label: _cell(after, k), "change": _change(before, after, k)}
        for k in metric_order(before, after)
    ]


def comparison_markdown(before: dict[str, float] | None, after: dict[str, float] | None, after_label: str = "after",
                        before_label: str = "before training") -> str:
    """A markdown table of comparison_rows."""
    rows = comparison_rows(before, after, after_label, before_label)
    header = list(rows[0]) if rows else ["metric", before_label, after_label, "change"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row[h] for h in header) + " |" for row in rows]
    return "\n".join(lines)


def comparison_text(before: dict[str, float] | None, after: dict[str, float] | None, after_label: str = "after",
                    before_label: str = "before training") -> str:
    """comparison_rows as aligned plain text, for a terminal."""
    rows = comparison_rows(before, after, after_label, before_label)
    header = list(rows[0]) if rows else ["metric", before_label, after_label, "change"]
    widths = [max(len(h), *(len(r[h]) for r in rows)) for h in header]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(r[h].ljust(w) for h, w in zip(header, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)
