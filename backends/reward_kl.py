"""The trainers' side of `algorithm.kl_penalty_fn` (KL toward the reference model in the reward).

The explorer scores rollouts without a reference model, so its advantages leave the penalty out. A
trainer that holds the reference model (torch, veRL) asks it for the batch's log-probs, and this
re-computes the batch's advantages from the penalised rewards (algorithms/kl_penalty.py) before the
step. Batches hold whole groups (schemas/rules.py), so a group's advantage sees all of its rewards.
The controller's coefficient is trainer state: `state_dict` goes into the trainer's JSON state file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

import algorithms
from buffer.experience import Experience

STATE_KEY = "reward_kl"  # the key of the controller's state in a trainer's JSON state file


class RewardKL:
    """Applies the reward's KL penalty to a batch, and keeps its (possibly adaptive) coefficient."""

    def __init__(self, algorithm: Any, controller: algorithms.KLController) -> None:
        self.algorithm = algorithm
        self.controller = controller

    @classmethod
    def for_algorithm(cls, algorithm: Any) -> RewardKL | None:
        controller = algorithms.kl_controller(algorithm)
        return None if controller is None else cls(algorithm, controller)

    def apply(
        self, batch: list[Experience], reference_logprobs: Callable[[list[Experience]], list[list[float]]]
    ) -> tuple[list[Experience], dict[str, float]]:
        """The batch with advantages of its KL-penalised rewards, and the penalty's metrics."""
        logprobs, ref_logprobs, mask = self._tensors(batch, reference_logprobs)
        rewards = torch.tensor([e.reward for e in batch], dtype=torch.float32)
        advantages, metrics = algorithms.apply_kl_penalty(
            self.algorithm, self.controller, rewards, [e.group_id for e in batch], logprobs, ref_logprobs, mask
        )
        return [replace(e, advantage=float(a)) for e, a in zip(batch, advantages.tolist(), strict=True)], metrics

    def token_penalties(
        self, batch: list[Experience], reference_logprobs: Callable[[list[Experience]], list[list[float]]]
    ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """Each experience's penalty per response token (by eid), for advantages made per token (GAE), and the
        penalty's metrics."""
        logprobs, ref_logprobs, mask = self._tensors(batch, reference_logprobs)
        rewards = torch.tensor([e.reward for e in batch], dtype=torch.float32)
        penalty, metrics = algorithms.token_penalty(self.algorithm, self.controller, logprobs, ref_logprobs, mask, rewards)
        return {e.eid: penalty[row, : len(e.response_token_ids)] for row, e in enumerate(batch)}, metrics

    @staticmethod
    def _tensors(
        batch: list[Experience], reference_logprobs: Callable[[list[Experience]], list[list[float]]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[B, T] rollout log-probs, the reference's, and the response mask."""
        ref = reference_logprobs(batch)
        width = max(max((len(e.response_token_ids) for e in batch), default=1), 1)
        logprobs = torch.zeros((len(batch), width))
        ref_logprobs = torch.zeros((len(batch), width))
        mask = torch.zeros((len(batch), width))
        for row, (exp, ref_row) in enumerate(zip(batch, ref, strict=True)):
            n = len(exp.response_token_ids)
            logprobs[row, :n] = torch.tensor(exp.logprobs, dtype=torch.float32)
            ref_logprobs[row, :n] = torch.tensor(ref_row[:n], dtype=torch.float32)
            mask[row, :n] = torch.tensor(exp.response_mask, dtype=torch.float32)
        return logprobs, ref_logprobs, mask

    def state_dict(self) -> dict[str, float]:
        return self.controller.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state:  # a checkpoint written before the penalty was on keeps the configured coefficient
            self.controller.load_state_dict(state)


def penalise_before_step(
    reward_kl: RewardKL | None, batch: list[Experience], per_token: bool,
    reference_logprobs: Callable[[list[Experience]], list[list[float]]],
) -> tuple[list[Experience], dict[str, torch.Tensor], dict[str, float]]:
    """What a trainer with the reference model does before a step: with no penalty, the batch as it is; with a
    critic (`per_token`: GAE takes the penalty per token, in its rewards) the penalties by eid; otherwise the
    batch with advantages re-made from the penalised rewards. Returns (batch, penalties, metrics)."""
    if reward_kl is None:
        return batch, {}, {}
    if per_token:
        penalties, metrics = reward_kl.token_penalties(batch, reference_logprobs)
        return batch, penalties, metrics
    batch, metrics = reward_kl.apply(batch, reference_logprobs)
    return batch, {}, metrics
