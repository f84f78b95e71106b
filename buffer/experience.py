"""The unit that flows from explore to train: one sampled response with everything training needs."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Experience:
    """One rollout of one task, as the trainer consumes it.

    `group_id` ties together the `repeat_times` samples of one task in one explore step (the group
    GRPO normalises over); `eid` is unique per experience and is what "trained exactly once" counts.
    """

    eid: str
    task_id: str
    group_id: str
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    logprobs: list[float]  # rollout logprob of each response token (the policy that sampled it)
    reward: float
    response_mask: list[int] = field(default_factory=list)  # 1 = trained on; empty means all ones
    reward_breakdown: dict[str, float] = field(default_factory=dict)
    advantage: float | None = None  # filled in before training (outcome advantage, per sequence)
    model_version: int = 0  # weights version of the engine that generated it
    explore_step: int = 0
    prompt_text: str = ""
    response_text: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    # On-policy distillation (algorithms/advantage/distill.py): the teacher's log-prob of each response token,
    # and the per-token advantages made from it (then `advantage` is their mean, for ordering and logs).
    teacher_logprobs: list[float] | None = None
    token_advantages: list[float] | None = None
    # The teacher's k likeliest tokens at each response position and their log-probs (policy_loss_fn topk_distill).
    teacher_topk_ids: list[list[int]] | None = None
    teacher_topk_logprobs: list[list[float]] | None = None
    # Process rewards per response token (math_workflow's step_token_reward), added to the advantage of those tokens
    # when the batch is built (backends/batch.py), after the outcome advantage of the group.
    token_rewards: list[float] | None = None
    # An expert (SFT) row the mix sample strategy added to the batch (tasks/expert.py): not sampled by the policy.
    expert: bool = False

    def __post_init__(self) -> None:
        if not self.response_mask:
            self.response_mask = [1] * len(self.response_token_ids)
        for name in ("teacher_logprobs", "token_advantages", "token_rewards", "teacher_topk_ids", "teacher_topk_logprobs"):
            values = getattr(self, name)
            if values is not None and len(values) != len(self.response_token_ids):
                raise ValueError(f"experience {self.eid}: {name} ({len(values)}) and response_token_ids "
                                 f"({len(self.response_token_ids)}) must have the same length")
        if not (len(self.response_token_ids) == len(self.logprobs) == len(self.response_mask)):
            raise ValueError(
                f"experience {self.eid}: response_token_ids ({len(self.response_token_ids)}), "
                f"logprobs ({len(self.logprobs)}) and response_mask ({len(self.response_mask)}) "
                "must have the same length"
            )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Experience:
        return cls(**json.loads(text))
