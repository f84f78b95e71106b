"""OPMD (online policy mirror descent) as Trinity-RFT defines it: the policy-gradient loss
-A × log p (no importance ratio: OPMD's advantage already holds the group baseline), aggregated with
``loss_agg_mode`` and scaled by 1 / (1 + tau), the regularisation towards the current policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.aggregation import aggregate
from algorithms.policy_loss.base import AdvantageScaledArgs, AggregatedArgs, register_policy_loss_fn

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class OPMDLossArgs(AggregatedArgs, AdvantageScaledArgs):
    """Online policy mirror descent loss."""

    tau: float = Field(1.0, ge=0, description="Regularisation strength τ: the loss is divided by 1 + τ.")


@register_policy_loss_fn("opmd", OPMDLossArgs)
def opmd(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    tau = float(args["tau"])
    if tau < 0:
        raise ValueError(f"algorithm.policy_loss_fn_args.tau must be >= 0, got {tau}")
    pg = aggregate(-inputs.advantages * inputs.logprobs, inputs, args["loss_agg_mode"], args.get("loss_scale_factor"))
    loss = pg / (1.0 + tau)
    return loss, {"pg_loss": loss.item(), "opmd_loss": loss.item()}
