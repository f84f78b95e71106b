"""Run workflows concurrently against the rollout engines: `runner_per_model` threads per engine.

Threads, not processes: a workflow mostly waits on its engine (a Ray actor), and scoring is small.
Each thread is bound to one engine and pulls tasks from a shared queue, so a slow engine takes
fewer tasks. A task whose workflow raises is reported with its task id and skipped; only a batch in
which every task fails is an error.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from backends.rollout import RolloutEngine
from buffer.experience import Experience
from buffer.taskset import Task
from workflows import get_workflow

logger = logging.getLogger(__name__)


@dataclass
class TaskFailure:
    task_id: str
    error: str  # "ExceptionType: message"


@dataclass
class RunnerResult:
    """Experiences of one batch (in task order) and small, JSON-friendly stats about it."""

    experiences: list[Experience]
    failures: list[TaskFailure] = field(default_factory=list)
    num_tasks: int = 0
    seconds: float = 0.0

    @property
    def stats(self) -> dict[str, float]:
        rewards = [e.reward for e in self.experiences]
        response_tokens = sum(len(e.response_token_ids) for e in self.experiences)
        return {
            "tasks": self.num_tasks,
            "tasks_failed": len(self.failures),
            "experiences": len(self.experiences),
            "reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
            "response_tokens": response_tokens,
            "response_length_mean": response_tokens / len(rewards) if rewards else 0.0,
            "seconds": self.seconds,
            "rollout_tokens_per_s": response_tokens / self.seconds if self.seconds > 0 else 0.0,
        }


class AllTasksFailedError(RuntimeError):
    """Every task of a batch failed: nothing to train on, most likely a systematic error."""


class WorkflowRunner:
    """A pool of `runner_per_model` workflow threads per engine."""

    def __init__(self, engines: Sequence[RolloutEngine], runner_per_model: int = 1) -> None:
        if not engines:
            raise ValueError("WorkflowRunner needs at least one rollout engine")
        if runner_per_model < 1:
            raise ValueError(f"runner_per_model must be >= 1, got {runner_per_model}")
        self.engines = list(engines)
        self.runner_per_model = runner_per_model

    def run(
        self,
        tasks: Sequence[Task],
        *,
        explore_step: int,
        repeat_times: int,
        model_version: int | None = None,
        max_tokens: int | None = None,
        default_workflow_type: str | None = None,
    ) -> RunnerResult:
        """Run each task's workflow once. `repeat_times` applies where the taskset sets none;
        `model_version` None asks the engine for the version it serves; `default_workflow_type`
        (explorer_input's) applies to tasks whose taskset names none."""
        started = time.perf_counter()
        todo: queue.SimpleQueue[tuple[int, Task]] = queue.SimpleQueue()
        for item in enumerate(tasks):
            todo.put(item)
        results: dict[int, list[Experience]] = {}
        failures: dict[int, TaskFailure] = {}
        lock = threading.Lock()

        def work(engine: RolloutEngine) -> None:
            while True:
                try:
                    index, task = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    workflow_type = task.workflow_type or default_workflow_type
                    if workflow_type is None:
                        raise ValueError("no workflow type: set the taskset's default_workflow_type")
                    workflow_cls = get_workflow(workflow_type)
                    version = engine.model_version() if model_version is None else model_version
                    workflow = workflow_cls(
                        task,
                        engine,
                        repeat_times=task.repeat_times or repeat_times,
                        explore_step=explore_step,
                        model_version=version,
                        max_tokens=max_tokens,
                    )
                    experiences = workflow.run()
                except Exception as err:  # one bad task must not sink the batch
                    logger.warning("task %s failed: %s: %s", task.task_id, type(err).__name__, err)
                    with lock:
                        failures[index] = TaskFailure(task.task_id, f"{type(err).__name__}: {err}")
                    continue
                with lock:
                    results[index] = experiences

        threads = [
            threading.Thread(target=work, args=(engine,), name=f"workflow-runner-{e}-{r}", daemon=True)
            for r in range(self.runner_per_model)
            for e, engine in enumerate(self.engines)
        ][: max(len(tasks), 1)]  # no idle threads; engine-interleaved so every engine gets work
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        result = RunnerResult(
            experiences=[e for i in sorted(results) for e in results[i]],
            failures=[failures[i] for i in sorted(failures)],
            num_tasks=len(tasks),
            seconds=time.perf_counter() - started,
        )
        if tasks and len(failures) == len(tasks):
            shown = "; ".join(f"{f.task_id}: {f.error}" for f in result.failures[:5])
            raise AllTasksFailedError(
                f"all {len(tasks)} tasks of explore step {explore_step} failed: {shown}"
            )
        return result
