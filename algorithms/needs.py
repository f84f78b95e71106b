"""What an algorithm needs, read from the declarations its pieces are registered with (`needs=`,
algorithms/registry.py): the one place the runtime and the schema ask "does it need a critic, a teacher, the
reference model?". A new piece that declares a need is picked up here, with no list to extend."""

from __future__ import annotations

from typing import Any

from algorithms.advantage.base import ADVANTAGE_FNS
from algorithms.kl import KL_LOSS_FNS
from algorithms.loss import kl_term
from algorithms.policy_loss.base import POLICY_LOSS_FNS
from algorithms.registry import Need


def pieces(algorithm: Any, strict: bool = True) -> list[tuple[str, str, frozenset[Need]]]:
    """(field, name, needs) of each of `algorithm`'s pieces that is on: its policy loss and advantage, and its KL
    terms with a non-zero kl_coef (kl_loss_fn in the loss, kl_penalty_fn in the reward). `strict`: an adaptive
    kl_loss_fn is an error (compute_loss has no state to adapt it; validation refuses it by name instead)."""
    from algorithms.kl_penalty import kl_controller

    loss = getattr(algorithm, "policy_loss_fn", None)
    advantage = getattr(algorithm, "advantage_fn", None)
    out = [("policy_loss_fn", loss, POLICY_LOSS_FNS.needs_of(loss)),
           ("advantage_fn", advantage, ADVANTAGE_FNS.needs_of(advantage))]
    if kl_term(algorithm, strict) is not None:
        out.append(("kl_loss_fn", algorithm.kl_loss_fn, KL_LOSS_FNS.needs_of(algorithm.kl_loss_fn)))
    if kl_controller(algorithm) is not None:
        out.append(("kl_penalty_fn", algorithm.kl_penalty_fn, KL_LOSS_FNS.needs_of(algorithm.kl_penalty_fn)))
    return [(field, name, needs) for field, name, needs in out if name is not None]


def _advantage_needs(algorithm: Any, need: Need) -> bool:
    return need in ADVANTAGE_FNS.needs_of(getattr(algorithm, "advantage_fn", None))


def needs_reference_model(algorithm: Any) -> bool:
    """True when a piece that is on needs the reference model's log-probs: a KL term (kl_loss_fn) or a KL reward
    penalty (kl_penalty_fn) with a non-zero kl_coef (a zero coefficient would waste a forward pass), or a policy
    loss that compares with the reference (dpo)."""
    return any("reference" in needs for _, _, needs in pieces(algorithm))


def needs_critic(algorithm: Any) -> bool:
    """True when the advantages are GAE over a critic's values (computed on the trainer, not the explorer)."""
    return _advantage_needs(algorithm, "critic")


def needs_teacher(algorithm: Any) -> bool:
    """True when the advantages come from a teacher's log-probs (scored on the explorer, not from rewards)."""
    return _advantage_needs(algorithm, "teacher")


def needs_greedy_baseline(algorithm: Any) -> bool:
    """True when the explorer must sample each task once greedily for the advantages' baseline (remax)."""
    return _advantage_needs(algorithm, "greedy_baseline")


def needs_groups(algorithm: Any) -> bool:
    """True when the advantages compare the responses to one task with each other: repeat_times ≥ 2, and batches
    made of whole groups."""
    return _advantage_needs(algorithm, "groups")


def needs_steps(algorithm: Any) -> bool:
    """True when the advantages are made per model turn from each episode's steps (gigpo)."""
    return _advantage_needs(algorithm, "steps")
