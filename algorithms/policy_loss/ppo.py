"""PPO-clip on token-level ratios against the rollout logprobs, with asymmetric clip ranges and the
dual clip (``clip_ratio_c``) for negative advantages: veRL's ``compute_policy_loss_vanilla``."""

from __future__ import annotations

from typing import Any

import torch

from algorithms.inputs import LossInputs
from algorithms.policy_loss.base import register_policy_loss_fn, strip_prefix
from algorithms.verl_compat import actor_config


@register_policy_loss_fn(
    "ppo",
    defaults={"clip_range": 0.2, "clip_range_low": None, "clip_range_high": None, "clip_ratio_c": 3.0,
              "loss_agg_mode": "token-mean"},
)
def ppo(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    config = actor_config("ppo", args, inputs.batch_info())
    loss, metrics = compute_policy_loss_vanilla(
        old_log_prob=inputs.old_logprobs,
        log_prob=inputs.logprobs,
        advantages=inputs.advantages,
        response_mask=inputs.response_mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
    )
    return loss, {"pg_loss": loss.item(), **strip_prefix(metrics)}
