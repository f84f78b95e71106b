"""Run workflows concurrently against the rollout engines: `runner_per_model` threads per engine.

Threads, not processes: a workflow mostly waits on its engine (a Ray actor), and scoring is small.
Each thread is bound to one engine and pulls tasks from a shared queue, so a slow engine takes
fewer tasks. A task whose workflow raises, or runs longer than `max_timeout` seconds, is tried again
up to `max_retry_times` times (explorer.max_timeout / max_retry_times), then reported with its task
id and skipped; only a batch in which every task fails is an error. A task whose prompt is longer
than `max_prompt_tokens` is skipped at once and counted (`prompts_too_long`), never retried.

Workflows call `engine.generate` one task at a time, and an engine is far faster on one large batch than
on many small calls. A vLLM engine batches calls made at once itself (`RolloutEngine.batches_calls`): each
goes to it as it comes and returns when its own requests are done, so a workflow that calls again (a
calculator's value, an agent's next turn) never waits for the slowest sequence of another task. For any
other engine (unless `coalesce=False`) the calls that the runner threads make while it is busy are merged
into its next single call.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from backends.history import CallRecord
from backends.rollout import RolloutEngine, Sample, SamplingSettings, TokenIds
from backends.weights import WeightsHandle
from buffer.experience import Experience
from buffer.taskset import Task
from workflows import get_workflow
from workflows.auxiliary import AuxiliaryModel
from workflows.base import PromptTooLongError
from workflows.render import ChatRenderer

logger = logging.getLogger(__name__)


@dataclass
class TaskFailure:
    task_id: str
    error: str  # "ExceptionType: message"
    timed_out: bool = False  # its last attempt ran past explorer.max_timeout


@dataclass
class RunnerResult:
    """Experiences of one batch (in task order) and small, JSON-friendly stats about it."""

    experiences: list[Experience]
    failures: list[TaskFailure] = field(default_factory=list)
    num_tasks: int = 0
    seconds: float = 0.0
    generate_calls: int = 0  # engine calls made (coalesced); 0 when not coalescing
    too_long: list[TaskFailure] = field(default_factory=list)  # skipped: prompt over max_prompt_tokens
    retries: int = 0  # attempts made again after a failure or a timeout
    timeouts: int = 0  # attempts that ran past max_timeout

    @property
    def failed_share(self) -> float:
        """The share of the batch's tasks that failed (or timed out) on every attempt."""
        return len(self.failures) / self.num_tasks if self.num_tasks else 0.0

    def check_failed_share(self, limit: float, what: str) -> None:
        """TooManyTasksFailed, naming the first error, when more than `limit` of the tasks failed."""
        if self.failures and self.failed_share > limit:
            first = self.failures[0]
            raise TooManyTasksFailed(
                f"{what}: {len(self.failures)} of {self.num_tasks} tasks failed ({self.failed_share:.0%}, more than "
                f"explorer.max_failed_task_ratio {limit:g}); the first, {first.task_id}: {first.error}"
            )

    @property
    def stats(self) -> dict[str, float]:
        rewards = [e.reward for e in self.experiences]
        response_tokens = sum(len(e.response_token_ids) for e in self.experiences)
        return {
            "tasks": self.num_tasks,
            "tasks_failed": len(self.failures),
            "prompts_too_long": len(self.too_long),
            "task_retries": self.retries,
            "task_timeouts": self.timeouts,
            "experiences": len(self.experiences),
            "reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
            "response_tokens": response_tokens,
            "response_length_mean": response_tokens / len(rewards) if rewards else 0.0,
            "seconds": self.seconds,
            "generate_calls": self.generate_calls,
            "rollout_tokens_per_s": response_tokens / self.seconds if self.seconds > 0 else 0.0,
        }


GATHER_WINDOW_S = 0.05


class CoalescingEngine(RolloutEngine):
    """Wraps an engine for one batch of the runner: generate calls from many threads become few calls on it.

    One dispatcher thread takes every request queued since the engine's last call returned and
    sends them together (one call per distinct SamplingSettings). An engine that batches calls itself
    (`batches_calls`) gets each call as it comes. Either way calls are refused once the batch is over.
    Use as a context manager.
    """

    def __init__(self, engine: RolloutEngine) -> None:
        self.engine = engine
        self.calls = 0  # engine.generate calls made (for stats)
        self._closed = False  # an attempt abandoned at its timeout may still call generate: refuse it
        self._close_lock = threading.Lock()
        self._requests: queue.SimpleQueue[
            tuple[list[TokenIds], SamplingSettings, Future[list[list[Sample]]]] | None
        ] = queue.SimpleQueue()
        self._dispatcher: threading.Thread | None = None
        if not engine.batches_calls:
            self._dispatcher = threading.Thread(target=self._dispatch, name="generate-coalescer", daemon=True)
            self._dispatcher.start()

    def __enter__(self) -> CoalescingEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._requests.put(None)
        if self._dispatcher is not None:
            self._dispatcher.join()

    def generate(self, prompts: list[TokenIds], sampling: SamplingSettings) -> list[list[Sample]]:
        done: Future[list[list[Sample]]] = Future()
        with self._close_lock:
            if self._closed:
                raise RuntimeError("the runner has finished this batch (a task that ran past its timeout)")
            if self._dispatcher is None:
                self.calls += 1
            else:
                self._requests.put((prompts, sampling, done))
        if self._dispatcher is None:
            return self.engine.generate(prompts, sampling)
        return done.result()

    def _dispatch(self) -> None:
        while True:
            first = self._requests.get()
            if first is None:
                return
            # Runner threads start together: a moment's wait lets their first requests share a call.
            time.sleep(GATHER_WINDOW_S)
            pending = [first]
            stop = False
            while True:  # everything that queued up while the engine was busy
                try:
                    request = self._requests.get_nowait()
                except queue.Empty:
                    break
                if request is None:
                    stop = True
                    break
                pending.append(request)
            groups: list[list[Any]] = []
            for request in pending:
                group = next((g for g in groups if g[0][1] == request[1]), None)
                if group is None:
                    groups.append([request])
                else:
                    group.append(request)
            for group in groups:
                self._run_group(group)
            if stop:
                return

    def _run_group(
        self, group: list[tuple[list[TokenIds], SamplingSettings, Future[list[list[Sample]]]]]
    ) -> None:
        prompts = [chat for chats, _, _ in group for chat in chats]
        try:
            self.calls += 1
            outputs = self.engine.generate(prompts, group[0][1])
            if len(outputs) != len(prompts):
                raise RuntimeError(f"engine returned {len(outputs)} results for {len(prompts)} prompts")
        except BaseException as err:
            for _, _, done in group:
                done.set_exception(err)
            return
        start = 0
        for chats, _, done in group:
            done.set_result(outputs[start : start + len(chats)])
            start += len(chats)

    def load_weights(self, weights: WeightsHandle) -> float:
        return self.engine.load_weights(weights)

    def model_version(self) -> int:
        return self.engine.model_version()

    def info(self) -> dict[str, Any]:
        return self.engine.info()

    def openai_base_url(self) -> str | None:
        return self.engine.openai_base_url()

    def openai_api_key(self) -> str:
        return self.engine.openai_api_key()

    def call_history(self, rollout_id: str) -> list[CallRecord]:
        return self.engine.call_history(rollout_id)


class AllTasksFailedError(RuntimeError):
    """Every task of a batch failed: nothing to train on, most likely a systematic error."""


class WorkflowRunner:
    """A pool of `runner_per_model` workflow threads per engine."""

    def __init__(
        self,
        engines: Sequence[RolloutEngine],
        renderer: ChatRenderer,
        runner_per_model: int = 1,
        *,
        coalesce: bool = True,
        auxiliary: dict[str, AuxiliaryModel] | None = None,
    ) -> None:
        if not engines:
            raise ValueError("WorkflowRunner needs at least one rollout engine")
        if runner_per_model < 1:
            raise ValueError(f"runner_per_model must be >= 1, got {runner_per_model}")
        self.engines = list(engines)
        self.renderer = renderer
        self.runner_per_model = runner_per_model
        self.coalesce = coalesce
        self.auxiliary = auxiliary or {}  # the experiment's auxiliary models, handed to every workflow

    def run(
        self,
        tasks: Sequence[Task],
        *,
        explore_step: int,
        repeat_times: int,
        model_version: int | None = None,
        max_tokens: int | None = None,
        default_workflow_type: str | None = None,
        max_prompt_tokens: int | None = None,
        min_tokens: int = 0,
        max_retry_times: int = 0,
        max_timeout: float | None = None,
        on_task_done: Callable[[int, int], None] | None = None,
    ) -> RunnerResult:
        """Run each task's workflow once. `repeat_times` applies where the taskset sets none;
        `model_version` None asks the engine for the version it serves; `default_workflow_type`
        (explorer_input's) applies to tasks whose taskset names none. A task is tried again up to
        `max_retry_times` times after an error or after running `max_timeout` seconds.
        `on_task_done(done, total)` is called once with 0 done, then from a runner thread each time a task ends, done or
        given up."""
        started = time.perf_counter()
        todo: queue.SimpleQueue[tuple[int, Task]] = queue.SimpleQueue()
        for item in enumerate(tasks):
            todo.put(item)
        results: dict[int, list[Experience]] = {}
        failures: dict[int, TaskFailure] = {}
        too_long: dict[int, TaskFailure] = {}
        counts = {"retries": 0, "timeouts": 0}
        lock = threading.Lock()

        def ended() -> None:  # under `lock`
            if on_task_done is not None:
                on_task_done(len(results) + len(failures) + len(too_long), len(tasks))

        with lock:
            ended()  # 0 of n: the total is known before the first task ends

        def attempt(engine: RolloutEngine, task: Task) -> list[Experience]:
            workflow_type = task.workflow_type or default_workflow_type
            if workflow_type is None:
                raise ValueError("no workflow type: set the taskset's default_workflow_type")
            workflow_cls = get_workflow(workflow_type)
            version = engine.model_version() if model_version is None else model_version
            workflow = workflow_cls(
                task,
                engine,
                self.renderer,
                repeat_times=task.repeat_times or repeat_times,
                explore_step=explore_step,
                model_version=version,
                max_tokens=max_tokens,
                max_prompt_tokens=max_prompt_tokens,
                min_tokens=min_tokens,
                auxiliary=self.auxiliary,
            )
            return workflow.run()

        def work(engine: RolloutEngine) -> None:
            while True:
                try:
                    index, task = todo.get_nowait()
                except queue.Empty:
                    return
                for tries in range(max_retry_times + 1):
                    try:
                        experiences = _within(max_timeout, attempt, engine, task)
                    except PromptTooLongError as err:  # the same prompt every time: skipped, counted
                        with lock:
                            too_long[index] = TaskFailure(task.task_id, str(err))
                            ended()
                        break
                    except Exception as err:  # one bad task must not sink the batch
                        timed_out = isinstance(err, TaskTimeoutError)
                        logger.warning("task %s %s (attempt %d of %d): %s: %s", task.task_id,
                                       "timed out" if timed_out else "failed", tries + 1, max_retry_times + 1,
                                       type(err).__name__, err)
                        with lock:
                            counts["timeouts"] += timed_out
                            if tries < max_retry_times:
                                counts["retries"] += 1
                            else:
                                failures[index] = TaskFailure(task.task_id, f"{type(err).__name__}: {err}", timed_out)
                                ended()
                        continue
                    with lock:
                        results[index] = experiences
                        ended()
                    break

        engines = [CoalescingEngine(e) if self.coalesce else e for e in self.engines]
        threads = [
            threading.Thread(target=work, args=(engine,), name=f"workflow-runner-{e}-{r}", daemon=True)
            for r in range(self.runner_per_model)
            for e, engine in enumerate(engines)
        ][: max(len(tasks), 1)]  # no idle threads; engine-interleaved so every engine gets work
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for engine in engines:
                if isinstance(engine, CoalescingEngine):
                    engine.__exit__()
        generate_calls = sum(e.calls for e in engines if isinstance(e, CoalescingEngine))

        result = RunnerResult(
            experiences=[e for i in sorted(results) for e in results[i]],
            failures=[failures[i] for i in sorted(failures)],
            num_tasks=len(tasks),
            seconds=time.perf_counter() - started,
            generate_calls=generate_calls,
            too_long=[too_long[i] for i in sorted(too_long)],
            retries=counts["retries"],
            timeouts=counts["timeouts"],
        )
        if tasks and failures and len(failures) + len(too_long) == len(tasks):
            shown = "; ".join(f"{f.task_id}: {f.error}" for f in result.failures[:5])
            raise AllTasksFailedError(
                f"all {len(tasks)} tasks of explore step {explore_step} failed: {shown}"
            )
        return result


class TooManyTasksFailed(RuntimeError):
    """More of a batch's tasks failed than explorer.max_failed_task_ratio allows: a bug in a workflow, its data or
    its reward, which a retry would meet again (not transient)."""


class TaskTimeoutError(TimeoutError):
    """A workflow ran longer than explorer.max_timeout."""


def _within(timeout_s: float | None, fn: Any, *args: Any) -> Any:
    """`fn(*args)` in a thread of its own, given up after `timeout_s` seconds (None: no limit).

    A thread cannot be stopped: an attempt given up keeps running in the background until its engine
    call returns, and its result is dropped (its engine calls fail once the batch is over)."""
    if timeout_s is None:
        return fn(*args)
    done: Future[Any] = Future()

    def call() -> None:
        try:
            done.set_result(fn(*args))
        except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
            done.set_exception(err)

    threading.Thread(target=call, name=f"{threading.current_thread().name}-attempt", daemon=True).start()
    try:
        return done.result(timeout=timeout_s)
    except TimeoutError:
        if done.done():  # finished in the same instant
            return done.result()
        raise TaskTimeoutError(f"ran longer than {timeout_s:g} s (explorer.max_timeout)") from None
