"""``ppo``: generalised advantage estimation (Schulman et al. 2016) over a critic's per-token values, as
Trinity-RFT's ``ppo`` advantage and veRL's ``compute_gae_advantage_return`` (called here) define it.

The reward of a sequence sits on its last response token (with a KL penalty in the reward, every token also gets
−kl_coef·KL_t, as veRL's PPO places it); with values V_t of the critic,
    δ_t = r_t + γ·V_{t+1} − V_t,   A_t = δ_t + γ·λ·A_{t+1},   returns R_t = A_t + V_t
(tokens outside the response mask are skipped), and the advantages are whitened over the batch's
response tokens. The values exist only where the critic is, on the trainer: the explorer leaves these
advantages out (it needs a critic: `algorithms.needs_critic`) and the trainer calls `gae` (backends/critic.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.advantage.base import register_advantage_fn, token_level_rewards
from algorithms.registry import Args

if TYPE_CHECKING:
    import torch

NAME = "ppo"


class GAEArgs(Args):
    """PPO's generalised advantage estimation over the critic's values (Trinity's defaults)."""

    gamma: float = Field(1.0, ge=0, le=1, description="Discount factor γ.")
    lam: float = Field(1.0, ge=0, le=1, description="GAE λ (1: Monte-Carlo returns minus the value baseline).")


@register_advantage_fn(NAME, GAEArgs, needs={"critic"})
def ppo(rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]) -> torch.Tensor:
    raise ValueError("algorithm.advantage_fn 'ppo' (GAE) needs the critic's values: the trainer computes these "
                     "advantages (algorithms.gae), not the explorer")


def gae(
    rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor, args: dict[str, Any],
    token_penalty: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both [B, T], from one reward per sequence [B] and the values [B, T]; `token_penalty`
    [B, T] (the reward's KL penalty, −kl_coef·KL_t: algorithms.kl_penalty) is added to each token's reward."""
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    mask = response_mask.float()
    token_rewards = token_level_rewards(rewards, mask)
    if token_penalty is not None:
        token_rewards = token_rewards + token_penalty.float() * mask
    return compute_gae_advantage_return(
        token_level_rewards=token_rewards,
        values=values.float() * mask,
        response_mask=mask,
        gamma=float(args["gamma"]),
        lam=float(args["lam"]),
    )
