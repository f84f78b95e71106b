"""CHORD's ``sft_is``: the negative log-likelihood of each token weighted by its (stop-gradient)
probability, so tokens the policy finds unlikely pull less (Trinity-RFT's expert-data loss)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.aggregation import aggregate
from algorithms.policy_loss.base import AggregatedArgs, register_policy_loss_fn

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class SFTISArgs(AggregatedArgs):
    """Probability-weighted negative log-likelihood."""

    use_token_level_loss: bool = Field(
        True, description="Average over tokens (loss_agg_mode); False: per sequence first (seq-mean-token-mean).")


@register_policy_loss_fn("sft_is", SFTISArgs)
def sft_is(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    weight = inputs.logprobs.detach().exp()
    agg = args["loss_agg_mode"] if args["use_token_level_loss"] else "seq-mean-token-mean"
    loss = aggregate(-inputs.logprobs * weight, inputs, agg, args.get("loss_scale_factor"))
    return loss, {"pg_loss": loss.item(), "sft_is_loss": loss.item()}
