"""PPO-clip on token-level ratios against the rollout logprobs, with asymmetric clip ranges and the
dual clip (``clip_ratio_c``) for negative advantages: veRL's ``compute_policy_loss_vanilla``.

Trinity's optional sequence masking (``enable_sequence_masking``) drops the negative-advantage tokens
of sequences whose mean KL(old || current) exceeds ``delta_sequence_masking``; it is passed to veRL
as the per-token loss multiplier (``rollout_is_weights``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.policy_loss.base import AdvantageScaledArgs, AggregatedArgs, register_policy_loss_fn
from algorithms.verl_compat import verl_policy_loss

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class PPOArgs(AggregatedArgs, AdvantageScaledArgs):
    """PPO-clip policy loss (with dual clip)."""

    clip_range: float = Field(0.2, gt=0, description="Symmetric clip range ε of the importance ratio.")
    clip_range_low: float | None = Field(
        None, gt=0, description="Lower clip range (ratio ≥ 1-clip_range_low); None: clip_range (derived)."
    )
    clip_range_high: float | None = Field(
        None, gt=0, description="Upper clip range (ratio ≤ 1+clip_range_high); None: clip_range (derived)."
    )
    clip_ratio_c: float = Field(3.0, gt=1.0, description="Dual-clip bound for negative advantages (> 1).")
    enable_sequence_masking: bool = Field(
        False, description="Mask negative-advantage tokens of sequences whose KL exceeds delta_sequence_masking."
    )
    delta_sequence_masking: float = Field(0.1, ge=0, description="Sequence KL threshold for sequence masking.")


@register_policy_loss_fn("ppo", PPOArgs)
def ppo(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    weights, extra = None, {}
    if args["enable_sequence_masking"]:
        weights, extra = sequence_mask(inputs, float(args["delta_sequence_masking"]))
    loss, metrics = verl_policy_loss(compute_policy_loss_vanilla, inputs, args, rollout_is_weights=weights)
    return loss, {**metrics, **extra}


def sequence_mask(inputs: LossInputs, delta: float) -> tuple[torch.Tensor, dict[str, float]]:
    """0.0 on negative-advantage tokens of sequences whose mean token KL exceeds ``delta``, else 1.0."""
    mask = inputs.response_mask.float()
    token_kl = (inputs.old_logprobs - inputs.logprobs).detach().clamp(-20.0, 20.0)
    seq_kl = (token_kl * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    drop = (inputs.advantages < 0) & (seq_kl > delta).unsqueeze(-1)
    return (~drop).float(), {"seq_mask_fraction": float((drop.float() * mask).sum() / mask.sum().clamp(min=1.0))}
