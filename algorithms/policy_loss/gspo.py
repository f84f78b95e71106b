"""GSPO: sequence-level importance ratio (geometric mean of token ratios), clipped: veRL's
``compute_policy_loss_gspo``. Defaults follow Trinity-RFT (tiny clip ranges, seq-mean-token-mean)."""

from __future__ import annotations

from typing import Any

import torch

from algorithms.inputs import LossInputs
from algorithms.policy_loss.base import register_policy_loss_fn, strip_prefix
from algorithms.verl_compat import actor_config


@register_policy_loss_fn(
    "gspo",
    defaults={"clip_range": None, "clip_range_low": 0.0003, "clip_range_high": 0.0004,
              "loss_agg_mode": "seq-mean-token-mean"},
)
def gspo(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    from verl.trainer.ppo.core_algos import compute_policy_loss_gspo

    config = actor_config("gspo", args, inputs.batch_info())
    loss, metrics = compute_policy_loss_gspo(
        old_log_prob=inputs.old_logprobs,
        log_prob=inputs.logprobs,
        advantages=inputs.advantages,
        response_mask=inputs.response_mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
    )
    return loss, {"pg_loss": loss.item(), **strip_prefix(metrics)}
