"""GSM8K task sets as every GSM8K recipe uses them; not a recipe itself.

The embedded default reads the bundled copy (`data/gsm8k`); GPU and service recipes read the hub's
`openai/gsm8k` (config `main`).
"""

from __future__ import annotations

from typing import Any

from schemas import DataFormat, ExplorerInput, GenerationConfig, StorageConfig, TaskFormat, TasksetConfig
from workflows.math_workflow import DEFAULT_SYSTEM_PROMPT

GSM8K_FORMAT = TaskFormat(prompt_key="question", response_key="answer")
HUB = {"path": "openai/gsm8k", "subset_name": "main"}
BUNDLED = {"path": "data/gsm8k"}
# SFT rows: the bundled train split's worked solutions ending in \\boxed{} (scripts/gsm8k_worked.py), under the
# system prompt the RL prompts get (math_workflow's default), so the warm-up teaches the form RL asks for.
WORKED_SFT = StorageConfig(
    name="gsm8k-worked", path="data/gsm8k-worked", split="train",
    format=DataFormat(prompt_type="plaintext", prompt_key="question", response_key="solution",
                        system_prompt=DEFAULT_SYSTEM_PROMPT),
)


def gsm8k_input(source: dict[str, str], eval_split: str = "test", eval_temperature: float | None = 0.0,
                eval_repeat_times: int | None = None, reward_fn_args: dict[str, Any] | None = None) -> ExplorerInput:
    """The train split sampled at temperature 1 (math_workflow), and `eval_split` for evaluation."""
    eval_args = {"rollout_args": GenerationConfig(temperature=eval_temperature)} if eval_temperature is not None else {}
    reward = {"reward_fn_args": reward_fn_args} if reward_fn_args else {}
    return ExplorerInput(
        taskset=TasksetConfig(
            name="gsm8k", **source, split="train", format=GSM8K_FORMAT,
            rollout_args=GenerationConfig(temperature=1.0), default_workflow_type="math_workflow", **reward,
        ),
        eval_tasksets=[
            TasksetConfig(
                name="gsm8k-eval", **source, split=eval_split, format=GSM8K_FORMAT, **eval_args,
                default_workflow_type="math_workflow", **reward,
                **({"repeat_times": eval_repeat_times} if eval_repeat_times is not None else {}),
            )
        ],
    )
