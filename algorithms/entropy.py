"""Entropy bonus (registry ``ENTROPY_LOSS_FNS``): each fn maps the loss inputs (their per-token entropy [B, T])
to the per-token matrix that is aggregated and scaled by ``-entropy_coef`` (veRL: loss -= coeff * entropy), with
the inputs whose rows it is aggregated over."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from algorithms.registry import Args, Registry

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs

ENTROPY_LOSS_FNS = Registry("algorithm.entropy_loss_fn")
register_entropy_loss_fn = ENTROPY_LOSS_FNS.register


class EntropyArgs(Args):
    """Entropy bonus."""

    entropy_coef: float = Field(0.0, description="Coefficient of the entropy term (loss -= coef * entropy).")


@register_entropy_loss_fn("default", EntropyArgs)
def default(inputs: LossInputs) -> tuple[torch.Tensor, LossInputs]:
    return inputs.entropy, inputs  # type: ignore[return-value]


# Trinity-RFT's name for the same term.
register_entropy_loss_fn("basic", EntropyArgs)(default)


@register_entropy_loss_fn("mix", EntropyArgs)
def mix(inputs: LossInputs) -> tuple[torch.Tensor, LossInputs]:
    """The mix family's term: the entropy of the policy's own samples only (an expert row's entropy is not the
    policy's exploration)."""
    if inputs.expert_mask is None or not bool((~inputs.expert_mask).any()):
        return inputs.entropy * 0.0, inputs  # type: ignore[operator]  # no sampled rows here: nothing to add
    sampled = inputs.rows(expert=False)
    return sampled.entropy, sampled  # type: ignore[return-value]
