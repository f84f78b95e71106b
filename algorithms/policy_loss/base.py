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


class PreferenceArgs(Args):
    """A loss over preference pairs: each pair is two rows of the batch, the chosen response then the rejected
    one to the same prompt, scored against the reference model. What the runtime does differently for such a
    loss follows from this class (`is_preference_loss`): the stage reads pairs from its dataset (tasks/dpo.py),
    the trainer keeps each pair in one micro-batch and loads the reference, a trainer without a reference
    refuses it."""


class ExpertRowsArgs(Args):
    """A loss over the policy's own samples and expert (SFT) rows that the `mix` sample strategy adds to the batch
    (`LossInputs.expert_mask`): the mix family. The rules (schemas/rules.py) pair such a loss with that strategy,
    and a trainer hands the loss the rows' expert mask and their whole-batch counts (`uses_expert_rows`)."""


class TeacherTopkArgs(AggregatedArgs):
    """A loss over the teacher's top-k log-probs at each position of the student's samples (`topk` of them): the
    explorer has the teacher score them (tasks/rollouts.py `score_with_teacher`), and a trainer hands the loss the
    student's current log-probs of the same tokens (`LossInputs.student_topk_logprobs`)."""

    topk: int


def teacher_topk(name: str | None, args: dict[str, Any] | None) -> int:
    """The teacher log-probs per position policy loss `name` learns from (its `topk`); 0 for every other loss."""
    model = POLICY_LOSS_FNS.args.get(name or "")
    if model is None or not issubclass(model, TeacherTopkArgs):
        return 0
    return int(POLICY_LOSS_FNS.resolve_args(name, args)["topk"])


def uses_expert_rows(name: str | None) -> bool:
    """True when policy loss `name` trains on expert rows beside sampled ones (its arguments are ExpertRowsArgs)."""
    args = POLICY_LOSS_FNS.args.get(name or "")
    return args is not None and issubclass(args, ExpertRowsArgs)


def is_preference_loss(name: str | None) -> bool:
    """True when policy loss `name` learns from (chosen, rejected) pairs (its arguments are PreferenceArgs)."""
    args = POLICY_LOSS_FNS.args.get(name or "")
    return args is not None and issubclass(args, PreferenceArgs)


def zero_at_zero_advantage(name: str | None, args: Mapping[str, Any] | None) -> bool:
    """True when policy loss `name` with `args` gives a zero-advantage sample no loss and no gradient (its
    arguments are AdvantageScaledArgs and say so for these values)."""
    model = POLICY_LOSS_FNS.args.get(name or "")
    if model is None or not issubclass(model, AdvantageScaledArgs):
        return False
    return model.zero_at_zero_advantage(POLICY_LOSS_FNS.resolve_args(name or "", args))
