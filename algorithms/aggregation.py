"""Loss aggregation: veRL's ``agg_loss``, so the torch and veRL backends reduce tokens the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs

# The modes veRL 0.9.1's agg_loss implements.
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def check_loss_agg_mode(mode: str, field: str = "algorithm.policy_loss_fn_args.loss_agg_mode") -> str:
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"{field}: unknown loss_agg_mode {mode!r}; choose one of {list(LOSS_AGG_MODES)}")
    return mode


def aggregate(
    loss_mat: torch.Tensor,
    inputs: LossInputs,
    loss_agg_mode: str,
    loss_scale_factor: int | None = None,
) -> torch.Tensor:
    """Reduce a [B, T] per-token matrix to a scalar over ``inputs.response_mask``."""
    from verl.trainer.ppo.core_algos import agg_loss

    return agg_loss(
        loss_mat=loss_mat,
        loss_mask=inputs.response_mask,
        loss_agg_mode=check_loss_agg_mode(loss_agg_mode),
        loss_scale_factor=loss_scale_factor,
        **inputs.batch_info(),
    )
