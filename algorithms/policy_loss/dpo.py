"""DPO (Rafailov et al. 2023), the sigmoid loss with conservative label smoothing, as Trinity-RFT defines it:

    z = β · [(log π(y_c|x) − log π_ref(y_c|x)) − (log π(y_r|x) − log π_ref(y_r|x))]
    loss = −(1 − ε) · log σ(z) − ε · log σ(−z)

over pairs of rows (chosen at even rows, rejected at odd ones: it needs pairs and the reference), each sequence's log-probability
the sum over its response tokens. β · (log π − log π_ref) of a response is its implicit reward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.policy_loss.base import register_policy_loss_fn
from algorithms.registry import Args

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class DPOArgs(Args):
    """Direct preference optimisation (sigmoid loss) on (chosen, rejected) pairs."""

    beta: float = Field(0.1, gt=0, description="Inverse temperature β of the implicit reward (Trinity's default 0.1).")
    label_smoothing: float = Field(
        0.0, ge=0, lt=0.5, description="Conservative-DPO label smoothing ε: the chance a pair's label is flipped."
    )


@register_policy_loss_fn("dpo", DPOArgs, needs={"pairs", "reference"})
def dpo(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    import torch.nn.functional as F

    if inputs.ref_logprobs is None:
        raise ValueError("the dpo loss compares the policy with the reference model: LossInputs.ref_logprobs is None")
    rows = inputs.logprobs.shape[0]
    if rows % 2:
        raise ValueError(f"the dpo loss takes (chosen, rejected) pairs of rows; got {rows} rows")
    mask = inputs.response_mask
    # log π(y|x) − log π_ref(y|x) of each whole response
    ratio = (inputs.logprobs * mask).sum(-1) - (inputs.ref_logprobs * mask).sum(-1)
    beta, smoothing = float(args["beta"]), float(args["label_smoothing"])
    chosen, rejected = beta * ratio[0::2], beta * ratio[1::2]
    margin = chosen - rejected
    losses = -F.logsigmoid(margin) * (1 - smoothing) - F.logsigmoid(-margin) * smoothing
    # Normalised by the whole batch's pairs (every row has a response: 2 rows a pair), so that the losses of
    # micro-batches add up to the batch's mean, as the other losses do (LossInputs.global_num_seqs).
    pairs = inputs.global_num_seqs // 2 if inputs.global_num_seqs else len(losses)
    loss = losses.sum() / max(pairs, 1)
    detached = margin.detach()
    return loss, {
        "pg_loss": loss.item(),
        "dpo_loss": loss.item(),
        "chosen_reward": chosen.detach().mean().item(),
        "rejected_reward": rejected.detach().mean().item(),
        "reward_margin": detached.mean().item(),
        "reward_accuracy": (detached > 0).float().mean().item(),
    }
