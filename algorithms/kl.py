"""KL-to-reference loss terms (registry ``KL_LOSS_FNS``): per-token estimators from veRL's ``kl_penalty``.

k1 = log p - log p_ref;  k2 = ½ (log p - log p_ref)²;  k3 / low_var_kl = exp(r) - r - 1 with
r = log p_ref - log p (clamped as veRL does);  abs = |k1|.  A trailing "+" (k1+, k3+, low_var_kl+)
keeps the value and takes k2's gradient (veRL's straight-through variant).
"""

from __future__ import annotations

import torch

from algorithms.registry import Registry

KL_LOSS_FNS = Registry("algorithm.kl_loss_fn")
register_kl_loss_fn = KL_LOSS_FNS.register
KL_DEFAULTS = {"kl_coef": 0.001}


def _verl_estimator(verl_name: str):
    def estimator(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        from verl.trainer.ppo.core_algos import kl_penalty

        return kl_penalty(logprob=logprobs, ref_logprob=ref_logprobs, kl_penalty=verl_name)

    estimator.__qualname__ = f"kl_{verl_name}"
    return estimator


for _name in ("k1", "k2", "k3", "low_var_kl", "abs", "mse", "k1+", "k3+", "low_var_kl+"):
    register_kl_loss_fn(_name, defaults=KL_DEFAULTS)(_verl_estimator(_name))
