"""KL-to-reference loss terms (registry ``KL_LOSS_FNS``).

Each fn maps ``(logprobs, ref_logprobs, old_logprobs)`` [B, T] to a per-token KL estimate, which the
loss aggregates and scales by ``kl_coef``. veRL's ``kl_penalty`` provides the estimators:
k1 = log p - log p_ref;  k2 = ½ (log p - log p_ref)²;  k3 / low_var_kl = exp(r) - r - 1 with
r = log p_ref - log p (clamped as veRL does);  abs = |k1|.  A trailing "+" (k1+, k3+, low_var_kl+)
keeps the value and takes k2's gradient (veRL's straight-through variant).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from algorithms.registry import Args, Registry

if TYPE_CHECKING:
    import torch

KL_LOSS_FNS = Registry("algorithm.kl_loss_fn")
register_kl_loss_fn = KL_LOSS_FNS.register


class KLArgs(Args):
    """KL term against the reference model (as a loss, or as a reward penalty)."""

    kl_coef: float = Field(0.001, ge=0, description="Coefficient of the KL term.")
    adaptive: bool = Field(False, description="Adapt kl_coef towards target_kl (needs target_kl and horizon).")
    target_kl: float | None = Field(None, gt=0, description="Target KL of the adaptive controller.")
    horizon: float | None = Field(None, gt=0, description="Horizon of the adaptive controller.")


# veRL's own estimators (verl.trainer.ppo.core_algos.kl_penalty), under veRL's names.
VERL_ESTIMATORS = ("k1", "k2", "k3", "low_var_kl", "abs", "mse", "k1+", "k3+", "low_var_kl+")


def _verl_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, name: str) -> torch.Tensor:
    from verl.trainer.ppo.core_algos import kl_penalty

    return kl_penalty(logprob=logprobs, ref_logprob=ref_logprobs, kl_penalty=name)


def _verl_estimator(name: str):
    def estimator(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
        return _verl_kl(logprobs, ref_logprobs, name)

    estimator.__qualname__ = f"kl_{name}"
    return estimator


for _name in VERL_ESTIMATORS:
    register_kl_loss_fn(_name, KLArgs, needs={"reference"})(_verl_estimator(_name))


@register_kl_loss_fn("corrected_k3", KLArgs, needs={"reference"})
def corrected_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    """Trinity-RFT's importance-corrected k3: clamp(p / p_old, 0, 2) × k3 (samples came from p_old)."""
    ratio = (logprobs - old_logprobs).exp().clamp(0.0, 2.0)
    return ratio * _verl_kl(logprobs, ref_logprobs, "k3")
