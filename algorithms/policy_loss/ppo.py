"""PPO-clip on token-level ratios against the rollout logprobs, with asymmetric clip ranges and the
dual clip (``clip_ratio_c``) for negative advantages: veRL's ``compute_policy_loss_vanilla``.

Trinity's optional sequence masking (``enable_sequence_masking``) drops the negative-advantage tokens
of sequences whose mean KL(old || current) exceeds ``delta_sequence_masking``; it is passed to veRL
as the per-token loss multiplier (``rollout_is_weights``).
"""

from __future__ import annotations

from typing import Any

import torch

from algorithms.inputs import LossInputs
from algorithms.policy_loss.base import register_policy_loss_fn, strip_prefix
from algorithms.verl_compat import actor_config


@register_policy_loss_fn(
    "ppo",
    defaults={"clip_range": 0.2, "clip_range_low": None, "clip_range_high": None, "clip_ratio_c": 3.0,
              "loss_agg_mode": "token-mean", "enable_sequence_masking": False, "delta_sequence_masking": 0.1},
)
def ppo(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    config = actor_config("ppo", args, inputs.batch_info())
    weights, extra = None, {}
    if args.get("enable_sequence_masking"):
        weights, extra = sequence_mask(inputs, float(args.get("delta_sequence_masking", 0.1)))
    loss, metrics = compute_policy_loss_vanilla(
        old_log_prob=inputs.old_logprobs,
        log_prob=inputs.logprobs,
        advantages=inputs.advantages,
        response_mask=inputs.response_mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
        rollout_is_weights=weights,
    )
    return loss, {"pg_loss": loss.item(), **strip_prefix(metrics), **extra}


@torch.no_grad()
def sequence_mask(inputs: LossInputs, delta: float) -> tuple[torch.Tensor, dict[str, float]]:
    """0.0 on negative-advantage tokens of sequences whose mean token KL exceeds ``delta``, else 1.0."""
    mask = inputs.response_mask.float()
    token_kl = torch.clamp(inputs.old_logprobs - inputs.logprobs, -20.0, 20.0)
    seq_kl = (token_kl * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    drop = (inputs.advantages < 0) & (seq_kl > delta).unsqueeze(-1)
    return (~drop).float(), {"seq_mask_fraction": float((drop.float() * mask).sum() / mask.sum().clamp(min=1.0))}
