"""The workflow interface and its registry.

A workflow turns one `Task` into experiences: it builds the prompt, samples `repeat_times` responses
from a `RolloutEngine` and scores them. Chats become token ids here (`self.renderer`), never in the
engine. A new workflow is one small module:

    @register_workflow("my_workflow")
    class MyWorkflow(Workflow):
        def run(self) -> list[Experience]:
            samples = self.sample([{"role": "user", "content": self.task.raw["prompt"]}])
            return [self.make_experience(s, reward=..., breakdown={...}) for s in samples]

and an import line in `workflows/__init__.py`. The taskset's `default_workflow_type` picks it.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from backends.rollout import RolloutEngine, Sample, SamplingSettings
from buffer.experience import Experience
from buffer.taskset import Task
from workflows.auxiliary import AuxiliaryModel
from workflows.render import ChatRenderer, Messages

WORKFLOWS: dict[str, type[Workflow]] = {}


class PromptTooLongError(ValueError):
    """A task's rendered prompt is longer than model.max_prompt_tokens: the runner skips it and counts it."""


def register_workflow(name: str) -> Callable[[type[Workflow]], type[Workflow]]:
    """Class decorator: make a workflow selectable as `default_workflow_type: name`."""

    def decorate(cls: type[Workflow]) -> type[Workflow]:
        if name in WORKFLOWS and WORKFLOWS[name] is not cls:
            raise ValueError(f"workflow '{name}' is already registered by {WORKFLOWS[name]!r}")
        cls.name = name
        WORKFLOWS[name] = cls
        return cls

    return decorate


class Workflow(ABC):
    """Runs one task once: `repeat_times` samples → experiences sharing one group id.

    One instance per (task, explore step); instances are cheap and run in runner threads.
    """

    name: ClassVar[str] = ""

    def __init__(
        self,
        task: Task,
        engine: RolloutEngine,
        renderer: ChatRenderer,
        *,
        repeat_times: int,
        explore_step: int,
        model_version: int,
        max_tokens: int | None = None,
        max_prompt_tokens: int | None = None,
        min_tokens: int = 0,
        auxiliary: dict[str, AuxiliaryModel] | None = None,
    ) -> None:
        if repeat_times < 1:
            raise ValueError(f"repeat_times must be >= 1, got {repeat_times}")
        self.task = task
        self.engine = engine
        self.renderer = renderer
        self.repeat_times = repeat_times
        self.explore_step = explore_step
        self.model_version = model_version
        self.max_tokens = max_tokens  # model.max_response_tokens; rollout_args.max_tokens wins
        self.max_prompt_tokens = max_prompt_tokens  # model.max_prompt_tokens: longer prompts are not sampled
        self.min_tokens = min_tokens  # model.min_response_tokens
        self.auxiliary = auxiliary or {}  # explorer.auxiliary_models by name (a judge, an answerer)
        # Unique even when one task appears twice in a step (a batch spanning an epoch boundary).
        self.group_id = f"{task.task_id}@{explore_step}/{uuid.uuid4().hex[:8]}"

    @classmethod
    def required_keys(cls, fmt: Any) -> list[str]:
        """Row keys this workflow reads (checked when the taskset is loaded); default: the prompt."""
        return [fmt.prompt_key]

    @abstractmethod
    def run(self) -> list[Experience]:
        """Sample and score; returns the experiences of this task for this explore step."""

    # -- helpers for subclasses --------------------------------------------------------------------

    def sampling_settings(self) -> SamplingSettings:
        """`repeat_times` samples with the taskset's rollout_args (unset args keep the defaults)."""
        settings = SamplingSettings(n=self.repeat_times, min_tokens=self.min_tokens)
        if self.max_tokens is not None:
            settings.max_tokens = self.max_tokens
        args = self.task.rollout_args
        for name in ("temperature", "top_p", "top_k", "max_tokens"):
            value = getattr(args, name, None) if args is not None else None
            if value is not None:
                setattr(settings, name, value)
        return settings

    def sample(self, messages: Messages | str, settings: SamplingSettings | None = None) -> list[Sample]:
        """`repeat_times` responses to one chat (rendered to token ids with the chat template), or to one
        plain-text prompt (a base model's: tokenized as it is), with `settings` (default: sampling_settings()).
        Raises PromptTooLongError when the prompt exceeds `max_prompt_tokens`."""
        prompt = self.renderer.encode_plain(messages) if isinstance(messages, str) else self.renderer.render(messages)
        if self.max_prompt_tokens is not None and len(prompt) > self.max_prompt_tokens:
            raise PromptTooLongError(
                f"task {self.task.task_id}: prompt of {len(prompt)} tokens exceeds model.max_prompt_tokens "
                f"({self.max_prompt_tokens}); skipped"
            )
        (samples,) = self.engine.generate([prompt], settings or self.sampling_settings())
        return self.renderer.with_text(samples)

    def make_experience(
        self,
        sample: Sample,
        index: int | str,
        reward: float,
        breakdown: dict[str, float] | None = None,
        prompt_text: str = "",
        info: dict[str, Any] | None = None,
    ) -> Experience:
        """An experience of this task's group from one sample (index = its place in the group)."""
        return Experience(
            eid=f"{self.group_id}/{index}",
            task_id=self.task.task_id,
            group_id=self.group_id,
            prompt_token_ids=list(sample.prompt_token_ids),
            response_token_ids=list(sample.response_token_ids),
            logprobs=list(sample.logprobs),
            reward=float(reward),
            reward_breakdown=dict(breakdown or {}),
            model_version=self.model_version,
            explore_step=self.explore_step,
            prompt_text=prompt_text,
            response_text=sample.text,
            info={"finish_reason": sample.finish_reason, **(info or {})},
        )
