"""Policy-loss registry and the arguments every loss shares.

Every policy loss has the signature ``fn(inputs: LossInputs, args: dict) -> (loss, metrics)`` where
``loss`` is a scalar tensor already aggregated with ``args["loss_agg_mode"]`` and ``metrics`` holds
floats, at least ``pg_loss``; it is registered with the model of its arguments (``Args``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

from pydantic import Field

from algorithms.registry import Args, Registry

F = TypeVar("F", bound=Callable[..., Any])

POLICY_LOSS_FNS = Registry("algorithm.policy_loss_fn")
register_policy_loss_fn = POLICY_LOSS_FNS.register

# Losses whose token mask is a choice over the whole batch (m2po): {name: fn(logprobs, old_logprobs, advantages,
# response_mask, args) -> (mask, metrics)} over all of the batch's rows. A trainer computes it before the loss, from
# the current log-probs of every micro-batch, and hands each micro-batch its rows (`LossInputs.token_mask`).
BATCH_MASKS: dict[str, Callable[..., Any]] = {}


def register_batch_mask(name: str) -> Callable[[F], F]:
    def decorator(fn: F) -> F:
        BATCH_MASKS[name] = fn
        return fn

    return decorator

# The modes veRL 0.9.1's agg_loss implements that Trinity names (algorithms/aggregation.py has them all).
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


class AggregatedArgs(Args):
    """A loss whose token losses are aggregated with `loss_agg_mode`."""

    loss_agg_mode: LossAggMode = Field("token-mean", description="How token losses are aggregated.")


class AdvantageScaledArgs(Args):
    """A loss whose every token term is the advantage times a factor, so a sample whose advantage is 0 adds no loss
    and no gradient: a trainer may leave it out of the pass (`trainer.skip_zero_advantage`). A loss declares this
    here, where it is registered, so that no trainer keeps a list of such losses that a new loss could miss."""

    @classmethod
    def zero_at_zero_advantage(cls, args: Mapping[str, Any]) -> bool:
        """True when, with these arguments, the loss of a zero-advantage sample is zero (a term of its own, such as
        a regulariser, makes it not)."""
        return True


class TeacherTopkArgs(AggregatedArgs):
    """The arguments of a loss over the teacher's top-k log-probs at each position of the student's samples (`topk`
    of them; registered with needs {"teacher_topk"}): the explorer has the teacher score them (tasks/rollouts.py
    `score_with_teacher`), and a trainer hands the loss the student's current log-probs of the same tokens
    (`LossInputs.student_topk_logprobs`)."""

    topk: int


def teacher_topk(name: str | None, args: dict[str, Any] | None) -> int:
    """The teacher log-probs per position policy loss `name` learns from (its `topk`); 0 for every other loss."""
    if "teacher_topk" not in POLICY_LOSS_FNS.needs_of(name):
        return 0
    return int(POLICY_LOSS_FNS.resolve_args(name or "", args)["topk"])


def uses_expert_rows(name: str | None) -> bool:
    """True when policy loss `name` trains on expert rows beside sampled ones (needs {"expert_rows"}: the mix
    family). The rules (schemas/rules.py) pair such a loss with the `mix` sample strategy, which adds the rows, and
    a trainer hands the loss the rows' expert mask and their whole-batch counts."""
    return "expert_rows" in POLICY_LOSS_FNS.needs_of(name)


def is_preference_loss(name: str | None) -> bool:
    """True when policy loss `name` learns from (chosen, rejected) pairs (needs {"pairs"}: each pair is two rows of
    the batch, the chosen response then the rejected one to the same prompt). The stage reads pairs from its dataset
    (tasks/dpo.py), and the trainer keeps each pair in one micro-batch."""
    return "pairs" in POLICY_LOSS_FNS.needs_of(name)


def zero_at_zero_advantage(name: str | None, args: Mapping[str, Any] | None) -> bool:
    """True when policy loss `name` with `args` gives a zero-advantage sample no loss and no gradient (its
    arguments are AdvantageScaledArgs and say so for these values)."""
    model = POLICY_LOSS_FNS.args.get(name or "")
    if model is None or not issubclass(model, AdvantageScaledArgs):
        return False
    return model.zero_at_zero_advantage(POLICY_LOSS_FNS.resolve_args(name or "", args))
