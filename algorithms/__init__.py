"""RL algorithm pieces shared by the trainer backends, built on veRL's ``core_algos``.

Registries (a new piece is one module: its function, registered with the model of its arguments):
``ADVANTAGE_FNS`` (algorithms/advantage/), ``POLICY_LOSS_FNS`` (algorithms/policy_loss/),
``KL_LOSS_FNS`` (algorithms/kl.py; also the estimators of the reward's KL penalty, algorithms/kl_penalty.py),
``ENTROPY_LOSS_FNS`` (algorithms/entropy.py); the critic's GAE (algorithms/advantage/gae.py) and value loss
(algorithms/value_loss.py). The schema derives
its function registries (names, arguments, defaults) from these: see docs/adding-a-loss.md.

The bottom layer of the project: it imports nothing of it, and neither torch nor veRL at import time
(`import schemas` imports it to validate configs), only inside the functions that compute.
"""

from algorithms.advantage import ADVANTAGE_FNS, compute_advantages, register_advantage_fn
from algorithms.advantage.distill import teacher_advantages
from algorithms.advantage.gae import gae
from algorithms.aggregation import LOSS_AGG_MODES
from algorithms.entropy import ENTROPY_LOSS_FNS, register_entropy_loss_fn
from algorithms.inputs import LossInputs
from algorithms.kl import KL_LOSS_FNS, register_kl_loss_fn
from algorithms.kl_penalty import KLController, apply_kl_penalty, kl_controller, token_penalty
from algorithms.loss import compute_loss, has_kl_term, needs_entropy
from algorithms.needs import (
    needs_critic,
    needs_greedy_baseline,
    needs_groups,
    needs_reference_model,
    needs_steps,
    needs_teacher,
)
from algorithms.policy_loss import POLICY_LOSS_FNS, register_policy_loss_fn
from algorithms.policy_loss.base import (
    BATCH_MASKS,
    is_preference_loss,
    teacher_topk,
    uses_expert_rows,
    zero_at_zero_advantage,
)
from algorithms.registry import NEEDS, Need, Registry, is_off
from algorithms.value_loss import explained_variance, value_loss

__all__ = [
    "BATCH_MASKS",
    "ADVANTAGE_FNS",
    "ENTROPY_LOSS_FNS",
    "KLController",
    "KL_LOSS_FNS",
    "LOSS_AGG_MODES",
    "POLICY_LOSS_FNS",
    "LossInputs",
    "NEEDS",
    "Need",
    "Registry",
    "apply_kl_penalty",
    "token_penalty",
    "compute_advantages",
    "compute_loss",
    "explained_variance",
    "gae",
    "is_off",
    "is_preference_loss",
    "uses_expert_rows",
    "zero_at_zero_advantage",
    "kl_controller",
    "needs_critic",
    "needs_entropy",
    "needs_greedy_baseline",
    "needs_groups",
    "needs_steps",
    "needs_reference_model",
    "has_kl_term",
    "needs_teacher",
    "register_advantage_fn",
    "register_entropy_loss_fn",
    "register_kl_loss_fn",
    "register_policy_loss_fn",
    "teacher_advantages",
    "teacher_topk",
    "value_loss",
]
