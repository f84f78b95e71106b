"""M2PO (second-moment trust policy optimization; Trinity-RFT's `m2po`): the importance-weighted policy gradient
−A·r with no clip, where r = π/π_old, and instead a token mask that holds the batch's second moment of the
log-ratio, mean((log r)²), at most `m2_threshold`.

Only tokens where PPO's clip would act are candidates (A > 0 with r > 1, or A < 0 with r < 1); among those, the
ones with the largest (log r)² are masked until the mean over the rest is within the threshold. The mask is a
choice over every token of the whole batch, so the torch trainer computes it before the loss (`batch_mask`, a pass
without gradients over all micro-batches) and hands each micro-batch its part (`LossInputs.token_mask`); a call
given the whole batch at once (Tinker's forward_backward_custom) chooses it itself. veRL, whose loss sees one
micro-batch at a time, refuses it. The
loss is normalised by all response tokens, masked ones included (the paper's footnote 2): token-mean only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from algorithms.policy_loss.base import AdvantageScaledArgs, register_batch_mask, register_policy_loss_fn

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class M2POArgs(AdvantageScaledArgs):
    """M2PO: the importance-weighted gradient, with the log-ratio's second moment held under a threshold."""

    m2_threshold: float = Field(0.04, ge=0, description="Most mean squared log-ratio over the kept trust-region "
                                "tokens; tokens with the largest are masked until the mean is within it.")
    log_ratio_clip: float = Field(20.0, gt=0, description="The log-ratio is clamped to ±this in the forward value "
                                  "(numerical safety; the gradient is the unclamped one's).")
    loss_agg_mode: Literal["token-mean"] = Field(
        "token-mean", description="M2PO divides by every response token, masked ones included: token-mean only.")


@register_batch_mask("m2po")
def batch_mask(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor,
               args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    """The M2PO mask of a whole batch (all tensors [N, T], the batch's rows), and its metrics."""
    import torch

    valid = response_mask.bool()
    log_ratio = (logprobs - old_logprobs).detach().float()
    second = log_ratio.square()
    trust = valid & (((advantages > 0) & (log_ratio > 0)) | ((advantages < 0) & (log_ratio < 0)))
    keep = valid.clone()
    values = second[trust]
    before = float(values.mean()) if values.numel() else 0.0
    threshold = float(args["m2_threshold"])
    after = before
    if values.numel() and before > threshold:
        ordered, order = torch.sort(values, stable=True)
        running = torch.cumsum(ordered, 0) / torch.arange(1, len(ordered) + 1, dtype=ordered.dtype)
        kept = int((running <= threshold).sum())
        dropped = torch.zeros(len(values), dtype=torch.bool)
        dropped[order[kept:]] = True
        where = trust.nonzero(as_tuple=False)[dropped]
        keep[where[:, 0], where[:, 1]] = False
        after = float(ordered[:kept].mean()) if kept else 0.0
    tokens = max(int(valid.sum()), 1)
    return keep, {"m2_before": before, "m2_after": after,
                  "masked_fraction": float((valid & ~keep).sum()) / tokens, "trust_region_fraction": float(trust.sum()) / tokens}


@register_policy_loss_fn("m2po", M2POArgs, needs={"batch_mask"})
def m2po(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    import torch

    from algorithms.aggregation import aggregate

    metrics: dict[str, float] = {}
    mask = inputs.token_mask
    if mask is None:  # the batch is this one call: its own mask
        mask, metrics = batch_mask(inputs.logprobs, inputs.old_logprobs, inputs.advantages, inputs.response_mask, args)
    log_ratio = inputs.logprobs - inputs.old_logprobs
    clip = float(args["log_ratio_clip"])
    stable = log_ratio + (log_ratio.clamp(-clip, clip) - log_ratio).detach()
    ratio = torch.exp(stable)
    loss_mat = torch.where(mask.bool(), -inputs.advantages * ratio, torch.zeros_like(ratio))
    loss = aggregate(loss_mat, inputs, "token-mean", args.get("loss_scale_factor"))
    valid = inputs.response_mask
    ppo_kl = float((-stable.detach() * valid).sum() / valid.sum().clamp(min=1.0))
    return loss, {"pg_loss": loss.item(), "ppo_kl": ppo_kl, **metrics}
