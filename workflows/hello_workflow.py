"""`hello_workflow`: the model learns to answer with a given identity string (after agent-lightning's
Tinker "hello" example).

Prompt: the prompt_key column as the user message (a system message only when format.system_prompt
or system_prompt_key gives one). Reward: how similar the response is to the target identity (the
response_key column, else reward_fn_args.target): difflib's ratio of the two, lower-cased with
whitespace collapsed, in [0, 1]. `accuracy` is 1.0 for an exact match (what evaluation reports).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from buffer.experience import Experience
from workflows.base import Workflow, register_workflow
from workflows.render import Messages


def normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def similarity(response: str, target: str) -> float:
    """1.0 for the target itself (case and spacing aside), less the more it differs."""
    return difflib.SequenceMatcher(None, normalize(response), normalize(target), autojunk=False).ratio()


@register_workflow("hello_workflow")
class HelloWorkflow(Workflow):
    """Reward = similarity of the answer to the identity string."""

    def target(self) -> str:
        fmt = self.task.format
        value = self.task.raw.get(fmt.response_key) if fmt is not None else None
        if value is None:
            value = (self.task.reward_fn_args or {}).get("target")
        if not value:
            raise KeyError(f"task {self.task.task_id}: no target identity (column {fmt.response_key!r} or "
                           "reward_fn_args.target)")
        return str(value)

    def messages(self) -> Messages:
        fmt = self.task.format
        key = getattr(fmt, "system_prompt_key", None)
        system = self.task.raw.get(key) if key else None
        system = system if system is not None else getattr(fmt, "system_prompt", None)
        user = [{"role": "user", "content": str(self.task.raw[fmt.prompt_key])}]
        return ([{"role": "system", "content": str(system)}] if system else []) + user

    def run(self) -> list[Experience]:
        target = self.target()
        messages = self.messages()
        experiences = []
        for index, sample in enumerate(self.sample(messages)):
            score = similarity(sample.text, target)
            breakdown: dict[str, Any] = {"similarity": score, "accuracy": 1.0 if normalize(sample.text) == normalize(target) else 0.0}
            experiences.append(self.make_experience(sample, index, reward=score, breakdown=breakdown,
                                                    prompt_text=messages[-1]["content"], info={"target": target}))
        return experiences
