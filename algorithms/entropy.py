"""Entropy bonus (registry ``ENTROPY_LOSS_FNS``): each fn maps per-token entropy [B, T] to the
per-token matrix that is aggregated and scaled by ``-entropy_coef`` (veRL: loss -= coeff * entropy)."""

from __future__ import annotations

import torch

from algorithms.registry import Registry

ENTROPY_LOSS_FNS = Registry("algorithm.entropy_loss_fn")
register_entropy_loss_fn = ENTROPY_LOSS_FNS.register


@register_entropy_loss_fn("default", defaults={"entropy_coef": 0.0})
def default(entropy: torch.Tensor) -> torch.Tensor:
    return entropy


# Trinity-RFT's name for the same term.
register_entropy_loss_fn("basic", defaults={"entropy_coef": 0.0})(default)
