"""CISPO: -sg(clip(ratio)) * A * log p, the importance weight clipped and gradient-stopped: veRL's
``compute_policy_loss_cispo``. Defaults follow Trinity-RFT (no lower clip, upper 0.28)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.policy_loss.base import AggregatedArgs, register_policy_loss_fn, strip_prefix
from algorithms.verl_compat import actor_config

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class CISPOArgs(AggregatedArgs):
    """Clipped importance-sampling policy optimisation loss."""

    clip_range_low: float = Field(1.0, ge=0, description="Lower clip of the (stop-gradient) IS weight.")
    clip_range_high: float = Field(0.28, ge=0, description="Upper clip of the (stop-gradient) IS weight.")


@register_policy_loss_fn("cispo", CISPOArgs)
def cispo(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    from verl.trainer.ppo.core_algos import compute_policy_loss_cispo

    config = actor_config(args, inputs.batch_info())
    loss, metrics = compute_policy_loss_cispo(
        old_log_prob=inputs.old_logprobs,
        log_prob=inputs.logprobs,
        advantages=inputs.advantages,
        response_mask=inputs.response_mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
    )
    return loss, {"pg_loss": loss.item(), **strip_prefix(metrics)}
