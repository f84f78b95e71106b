"""``on_policy_distill`` and ``jsd``: per-token advantages from a teacher's log-probs of the student's own
samples (on-policy distillation, Agarwal et al. 2024; Trinity-RFT's advantages of these names).

For each sampled token t with the student's sampling log-prob s_t and the teacher's log-prob q_t:
    on_policy_distill:  A_t = kl_coef · (q_t − s_t)            (minus the per-token reverse KL)
    jsd:                A_t = −kl_coef · [λ·p/m·log(p/m) + (1−λ)·q/m·log(q/m)],  m = (p + q)/2
with p = exp(s_t), q = exp(q_t). The teacher is an auxiliary model (explorer.auxiliary_models) that scores
each experience on the explorer (tasks/rollouts.py `score_with_teacher`); the trainer then sees ordinary per-token advantages.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.advantage.base import register_advantage_fn
from algorithms.registry import Args

if TYPE_CHECKING:
    import torch

class OnPolicyDistillArgs(Args):
    """Reverse-KL-to-teacher advantage for on-policy distillation."""

    kl_coef: float = Field(1.0, ge=0, description="Scale of the teacher log-ratio advantage.")


class JSDArgs(OnPolicyDistillArgs):
    """Jensen-Shannon-to-teacher advantage for distillation."""

    lambda_coef: float = Field(0.5, ge=0, le=1, description="Mixture weight λ of the student and the teacher.")


def _no_rewards(name: str) -> Any:
    def fn(rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]) -> Any:
        raise ValueError(f"algorithm.advantage_fn {name!r} needs a teacher's log-probs of each sampled token: "
                         "algorithms.advantage.distill.teacher_advantages computes it, not the reward path")
    return fn


register_advantage_fn("on_policy_distill", OnPolicyDistillArgs, needs={"teacher"})(_no_rewards("on_policy_distill"))
register_advantage_fn("jsd", JSDArgs, needs={"teacher"})(_no_rewards("jsd"))


def teacher_advantages(name: str, student: list[float], teacher: list[float], args: dict[str, Any]) -> list[float]:
    """One experience's per-token advantages from its student and teacher log-probs (equal lengths)."""
    if len(student) != len(teacher):
        raise ValueError(f"{len(student)} student log-probs against {len(teacher)} teacher log-probs")
    coef = float(args.get("kl_coef", 1.0))
    if name == "on_policy_distill":
        return [coef * (q - s) for s, q in zip(student, teacher, strict=True)]
    if name != "jsd":
        raise ValueError(f"advantage_fn {name!r} does not learn from a teacher")
    lam = float(args.get("lambda_coef", 0.5))
    out = []
    for s, q in zip(student, teacher, strict=True):
        top = max(s, q)
        m = top + math.log((math.exp(s - top) + math.exp(q - top)) / 2)  # log of the mixture, without overflow
        out.append(-coef * (lam * math.exp(s - m) * (s - m) + (1 - lam) * math.exp(q - m) * (q - m)))
    return out
