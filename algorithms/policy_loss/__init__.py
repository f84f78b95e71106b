"""Policy losses (registry ``POLICY_LOSS_FNS``): one module per loss, with the model of its arguments.

Every module of this folder is imported here, so a new loss is one new module (docs/adding-a-loss.md).
"""

from algorithms.policy_loss.base import POLICY_LOSS_FNS, register_policy_loss_fn
from algorithms.registry import import_submodules

import_submodules(__name__, __path__)

__all__ = ["POLICY_LOSS_FNS", "register_policy_loss_fn"]
