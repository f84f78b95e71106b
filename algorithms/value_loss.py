"""The critic's loss and metrics (PPO with GAE): veRL's ``compute_value_loss``, the clipped value loss

    L = ½ · agg( max((V − R)², (clip(V, V_old − c, V_old + c) − R)²) )

with V the values being trained, V_old those the advantages were computed with, R the GAE returns and
c = `trainer.critic.cliprange_value` (veRL's and Trinity's `critic.cliprange_value`); and the explained
variance of the returns by the values, veRL's `critic/vf_explained_var`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from algorithms.aggregation import check_loss_agg_mode

if TYPE_CHECKING:
    import torch


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, response_mask: torch.Tensor,
    cliprange_value: float, loss_agg_mode: str = "token-mean", global_num_tokens: int | None = None,
    global_num_seqs: int | None = None,
) -> tuple[torch.Tensor, float]:
    """(loss, fraction of tokens where the clipped term was the larger); all tensors [B, T]. With the
    whole batch's token and sequence counts given, the losses of its micro-batches add up to its loss."""
    from verl.trainer.ppo.core_algos import compute_value_loss

    loss, clipfrac = compute_value_loss(
        vpreds=values, returns=returns, values=old_values, response_mask=response_mask.float(),
        cliprange_value=float(cliprange_value), loss_agg_mode=check_loss_agg_mode(loss_agg_mode),
        dp_size=1, batch_num_tokens=global_num_tokens, global_batch_size=global_num_seqs,
    )
    return loss, float(clipfrac)


def explained_variance(returns: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor) -> float:
    """1 − Var(R − V) / Var(R) over the response tokens (veRL's formula, with its 1e-5 in the denominator)."""
    import torch

    keep = response_mask.bool()
    r, v = torch.masked_select(returns.float(), keep), torch.masked_select(values.float(), keep)
    if r.numel() < 2:
        return float("nan")
    return float(1.0 - torch.var(r - v) / (torch.var(r) + 1e-5))
