"""Policy losses (registry ``POLICY_LOSS_FNS``); one module per loss."""

from algorithms.policy_loss import cispo, gspo, importance_sampling, opmd, ppo, sft  # noqa: F401  (register)
from algorithms.policy_loss.base import POLICY_LOSS_FNS, register_policy_loss_fn

__all__ = ["POLICY_LOSS_FNS", "register_policy_loss_fn"]
