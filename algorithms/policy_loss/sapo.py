"""SAPO (soft adaptive policy optimisation, arXiv 2511.20347): the hard PPO clip replaced by a soft gate
f(r) = σ(τ·(r - 1)) · 4/τ of the token ratio r, with τ = tau_pos for positive advantages and tau_neg
(≥ tau_pos) for the others; the loss is -A · f(r), so its gradient is A · 4σ(1-σ) · r · ∇log p (the plain
policy gradient at r = 1, fading as r leaves 1). Trinity-RFT's ``sapo`` multiplies the detached gate by
log p instead, a gradient 2/τ times the policy gradient at r = 1; we follow the paper's objective."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationInfo, field_validator

from algorithms.aggregation import aggregate
from algorithms.policy_loss.base import AdvantageScaledArgs, AggregatedArgs, register_policy_loss_fn

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class SAPOArgs(AggregatedArgs, AdvantageScaledArgs):
    """Soft-gated policy loss."""

    tau_pos: float = Field(1.0, gt=0, description="Gate temperature for positive advantages.")
    tau_neg: float = Field(1.05, gt=0, description="Gate temperature for the other advantages (≥ tau_pos).")

    @field_validator("tau_neg")
    @classmethod
    def _neg_at_least_pos(cls, value: float, info: ValidationInfo) -> float:
        tau_pos = info.data.get("tau_pos")
        if tau_pos is not None and value < tau_pos:
            raise ValueError(f"must be ≥ tau_pos ({tau_pos}): negative updates are damped at least as hard as positive ones")
        return value


@register_policy_loss_fn("sapo", SAPOArgs)
def sapo(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    log_ratio = (inputs.logprobs - inputs.old_logprobs).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    positive = (inputs.advantages > 0).float()
    tau = positive * float(args["tau_pos"]) + (1.0 - positive) * float(args["tau_neg"])
    gate = (tau * (ratio - 1.0)).sigmoid() * (4.0 / tau)
    loss = aggregate(-inputs.advantages * gate, inputs, args["loss_agg_mode"], args.get("loss_scale_factor"))
    mask = inputs.response_mask
    count = mask.sum().clamp(min=1.0)
    return loss, {"pg_loss": loss.item(), "avg_soft_gate": float((gate.detach() * mask).sum() / count),
                  "ppo_kl": float((-log_ratio.detach() * mask).sum() / count)}
