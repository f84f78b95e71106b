"""Entropy bonus (registry ``ENTROPY_LOSS_FNS``): each fn maps per-token entropy [B, T] to the
per-token matrix that is aggregated and scaled by ``-entropy_coef`` (veRL: loss -= coeff * entropy)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from algorithms.registry import Args, Registry

if TYPE_CHECKING:
    import torch

ENTROPY_LOSS_FNS = Registry("algorithm.entropy_loss_fn")
register_entropy_loss_fn = ENTROPY_LOSS_FNS.register


class EntropyArgs(Args):
    """Entropy bonus."""

    entropy_coef: float = Field(0.0, description="Coefficient of the entropy term (loss -= coef * entropy).")


@register_entropy_loss_fn("default", EntropyArgs)
def default(entropy: torch.Tensor) -> torch.Tensor:
    return entropy


# Trinity-RFT's name for the same term.
register_entropy_loss_fn("basic", EntropyArgs)(default)
