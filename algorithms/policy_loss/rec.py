"""REC (Trinity-RFT's ``rec`` family of REINFORCE-with-correction losses): -w · A · log p on the tokens a
clip rule keeps, plus an optional regulariser towards the rollout policy.

clip_mode (r is the stop-gradient token ratio):
  none            every token;
  one-side        r ≤ 1+ε_high where A ≥ 0, r ≥ 1-ε_low where A ≤ 0;
  two-side        1-ε_low ≤ r ≤ 1+ε_high;
  ring            two-side, or far outside it (A ≥ 0 and r ≤ 1-ε'_low; A ≤ 0 and r ≥ 1+ε'_high);
  gspo-one-side   one-side on the sequence's geometric-mean ratio (aggregated seq-mean-token-mean).
weight: none; importance_sampling (A·r); gspo_importance_sampling (A·sequence ratio); advantage (A·e^(A/temp)).
regularizer: none; k2 (coef·(log p - log p_old)²); forward-kl (-coef·log p).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from algorithms.aggregation import aggregate
from algorithms.policy_loss.base import AdvantageScaledArgs, AggregatedArgs, register_policy_loss_fn

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class RECArgs(AggregatedArgs, AdvantageScaledArgs):
    """REC policy loss."""

    epsilon_low: float = Field(0.2, gt=0, le=1, description="Lower clip ε_low of the token ratio.")
    epsilon_high: float = Field(0.2, gt=0, description="Upper clip ε_high of the token ratio.")
    epsilon_low_prime: float = Field(0.6, gt=0, le=1, description="ring: lower edge ε'_low of the outer band.")
    epsilon_high_prime: float = Field(2.0, gt=0, description="ring: upper edge ε'_high of the outer band.")
    clip_mode: Literal["none", "one-side", "two-side", "ring", "gspo-one-side"] = Field(
        "none", description="Which tokens keep their gradient (see the module).")
    weight: Literal["none", "importance_sampling", "gspo_importance_sampling", "advantage"] = Field(
        "none", description="How the advantage is weighted.")
    regularizer: Literal["none", "k2", "forward-kl"] = Field("none", description="Regulariser added to the loss.")
    regularizer_coef: float = Field(0.0, ge=0, description="Coefficient of the regulariser.")
    temp: float = Field(1.0, gt=0, description="weight advantage: temperature of e^(A/temp).")

    @classmethod
    def zero_at_zero_advantage(cls, args: Mapping[str, Any]) -> bool:
        # The regulariser pulls every token toward the rollout policy, whatever its advantage.
        return args["regularizer"] == "none" or float(args["regularizer_coef"]) == 0.0


@register_policy_loss_fn("rec", RECArgs)
def rec(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    lp, adv, mask = inputs.logprobs, inputs.advantages, inputs.response_mask
    lo, hi = float(args["epsilon_low"]), float(args["epsilon_high"])
    log_ratio = (lp - inputs.old_logprobs).detach().clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    seq_ratio = ((log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)).exp()
    pos, neg = adv >= 0, adv <= 0
    mode = args["clip_mode"]
    if mode == "two-side":
        keep = (ratio >= 1 - lo) & (ratio <= 1 + hi)
    elif mode == "one-side":
        keep = (pos & (ratio <= 1 + hi)) | (neg & (ratio >= 1 - lo))
    elif mode == "gspo-one-side":
        keep = (pos & (seq_ratio <= 1 + hi)) | (neg & (seq_ratio >= 1 - lo))
    elif mode == "ring":
        keep = (((ratio >= 1 - lo) & (ratio <= 1 + hi)) | (pos & (ratio <= 1 - float(args["epsilon_low_prime"])))
                | (neg & (ratio >= 1 + float(args["epsilon_high_prime"]))))
    else:
        keep = mask > -1  # every token
    weighted = {"none": adv, "importance_sampling": adv * ratio, "gspo_importance_sampling": adv * seq_ratio,
                "advantage": adv * (adv / float(args["temp"])).exp()}[args["weight"]]
    losses = -weighted * lp * keep.float()
    coef = float(args["regularizer_coef"])
    if args["regularizer"] == "k2":
        losses = losses + coef * (lp - inputs.old_logprobs).square()
    elif args["regularizer"] == "forward-kl":
        losses = losses - coef * lp
    agg = "seq-mean-token-mean" if mode == "gspo-one-side" else args["loss_agg_mode"]
    loss = aggregate(losses, inputs, agg, args.get("loss_scale_factor"))
    clipfrac = float(((~keep).float() * mask).sum() / mask.sum().clamp(min=1.0))
    return loss, {"pg_loss": loss.item(), "pg_clipfrac": clipfrac}
