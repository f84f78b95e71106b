"""CHORD's ``sft_phi``: the negative log-likelihood of each token weighted by φ(p) = p·(1-p) (stop-gradient),
which down-weights tokens the policy already finds near-certain or near-impossible; log p is capped at
log(cutoff_prob) (Trinity-RFT's expert-data loss)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.aggregation import aggregate
from algorithms.policy_loss.base import AggregatedArgs, register_policy_loss_fn

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class SFTPhiArgs(AggregatedArgs):
    """φ-weighted negative log-likelihood."""

    use_token_level_loss: bool = Field(
        True, description="Average over tokens (loss_agg_mode); False: per sequence first (seq-mean-token-mean).")
    cutoff_prob: float = Field(1.0, gt=0, le=1, description="log p is capped at log(cutoff_prob); 1: no cap.")


@register_policy_loss_fn("sft_phi", SFTPhiArgs)
def sft_phi(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    prob = inputs.logprobs.detach().exp()
    logprobs = inputs.logprobs
    cutoff = float(args["cutoff_prob"])
    if cutoff < 1.0:
        logprobs = logprobs.clamp(max=math.log(cutoff))
    agg = args["loss_agg_mode"] if args["use_token_level_loss"] else "seq-mean-token-mean"
    loss = aggregate(-logprobs * prob * (1.0 - prob), inputs, agg, args.get("loss_scale_factor"))
    return loss, {"pg_loss": loss.item(), "sft_phi_loss": loss.item()}
