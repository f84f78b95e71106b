"""Advantage functions (registry ``ADVANTAGE_FNS``): one module per estimator, with the model of its
arguments. Every module of this folder is imported here, so a new estimator is one new module."""

from __future__ import annotations

from typing import TYPE_CHECKING

from algorithms.advantage.base import ADVANTAGE_FNS, register_advantage_fn
from algorithms.registry import import_submodules

if TYPE_CHECKING:
    import torch

import_submodules(__name__, __path__)


def compute_advantages(
    algorithm, rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor,
    baselines: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token advantages [B, T] from one scalar reward per sequence, grouped by ``group_ids``. A KL
    penalty in the reward (algorithm.kl_penalty_fn) is applied before this, where the reference model's
    log-probs are (algorithms/kl_penalty.py, on the trainer). ``baselines`` [B]: the reward of the greedy
    answer to each sequence's task, for the estimators that need it (registered with needs {"greedy_baseline"}: remax)."""
    import torch

    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if rewards.dim() != 1 or rewards.shape[0] != response_mask.shape[0] or len(group_ids) != rewards.shape[0]:
        raise ValueError(
            f"compute_advantages: rewards {tuple(rewards.shape)}, group_ids ({len(group_ids)}) and "
            f"response_mask {tuple(response_mask.shape)} must agree on the batch size"
        )
    name = algorithm.advantage_fn
    fn = ADVANTAGE_FNS.lookup(name)
    args = ADVANTAGE_FNS.resolve_args(name, getattr(algorithm, "advantage_fn_args", None))
    if "greedy_baseline" in ADVANTAGE_FNS.needs_of(name):
        return fn(rewards.to(response_mask.device), list(group_ids), response_mask, args, baselines=baselines)
    return fn(rewards.to(response_mask.device), list(group_ids), response_mask, args)


__all__ = ["ADVANTAGE_FNS", "compute_advantages", "register_advantage_fn"]
