"""SFT: negative log-likelihood of the response tokens, aggregated with ``loss_agg_mode``.
(veRL's own ``sft_loss`` needs its TensorDict batch, so we aggregate with its ``agg_loss`` instead.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from algorithms.aggregation import aggregate
from algorithms.policy_loss.base import AggregatedArgs, register_policy_loss_fn

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class SFTArgs(AggregatedArgs):
    """Negative log-likelihood of the response tokens."""


@register_policy_loss_fn("sft", SFTArgs)
def sft(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    loss = aggregate(-inputs.logprobs, inputs, args["loss_agg_mode"], args.get("loss_scale_factor"))
    return loss, {"pg_loss": loss.item(), "sft_loss": loss.item()}
