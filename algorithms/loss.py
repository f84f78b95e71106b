"""The training loss: policy loss + kl_coef × KL-to-reference − entropy_coef × entropy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from algorithms.aggregation import aggregate
from algorithms.entropy import ENTROPY_LOSS_FNS
from algorithms.inputs import LossInputs
from algorithms.kl import KL_LOSS_FNS
from algorithms.policy_loss import POLICY_LOSS_FNS
from algorithms.registry import is_off

if TYPE_CHECKING:
    import torch


# The metrics of a step that compute_loss gives once per micro-batch, and how a trainer makes the step's value of them.
STEP_METRICS = frozenset({"mu"})  # one value per step (a loss's scheduled coefficient): taken as it is


def summed_over_micro_batches(name: str) -> bool:
    """True for a metric compute_loss normalises by the whole batch's counts, as it does the loss (every loss term,
    and the entropy): the step's value is the sum over its micro-batches. The others are each micro-batch's mean,
    weighted by its share of the batch."""
    return name.endswith("loss") or name == "entropy"


def kl_term(algorithm, strict: bool = True) -> tuple[str, float] | None:
    """(estimator, kl_coef) of the loss's KL term toward the reference; None when it is off (no estimator, or
    kl_coef 0). `strict`: an adaptive coefficient is an error."""
    name = getattr(algorithm, "kl_loss_fn", None)
    if is_off(name):
        return None
    KL_LOSS_FNS.lookup(name)
    args = KL_LOSS_FNS.resolve_args(name, getattr(algorithm, "kl_loss_fn_args", None))
    if strict and args.get("adaptive"):
        # An adaptive coefficient is state carried across steps; compute_loss is stateless.
        raise ValueError("algorithm.kl_loss_fn_args.adaptive: an adaptive KL coefficient is not supported yet")
    coef = float(args["kl_coef"])
    return (name, coef) if coef != 0.0 else None


def _entropy_term(algorithm) -> tuple[str, float] | None:
    name = getattr(algorithm, "entropy_loss_fn", None)
    if is_off(name):
        return None
    ENTROPY_LOSS_FNS.lookup(name)
    coef = float(ENTROPY_LOSS_FNS.resolve_args(name, getattr(algorithm, "entropy_loss_fn_args", None))["entropy_coef"])
    return (name, coef) if coef != 0.0 else None


def has_kl_term(algorithm) -> bool:
    """True when the loss has a KL term toward the reference (kl_loss_fn with a non-zero kl_coef): the one test of
    it, which the trainer backends and their settings read."""
    return kl_term(algorithm, strict=False) is not None


def needs_entropy(algorithm) -> bool:
    """True when an entropy term with a non-zero entropy_coef is on."""
    return _entropy_term(algorithm) is not None


def compute_loss(algorithm, inputs: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss to backpropagate, and float metrics: pg_loss, pg_clipfrac, pg_clipfrac_lower, ppo_kl
    (policy losses that have them), kl_loss (KL on), entropy (entropy given), loss."""
    inputs.validate()
    name = algorithm.policy_loss_fn
    fn = POLICY_LOSS_FNS.lookup(name)
    args: dict[str, Any] = POLICY_LOSS_FNS.resolve_args(name, getattr(algorithm, "policy_loss_fn_args", None))
    agg_mode = args.get("loss_agg_mode", "token-mean")
    scale = args.get("loss_scale_factor")

    loss, metrics = fn(inputs, args)

    kl = kl_term(algorithm)
    if kl is not None:
        kl_name, kl_coef = kl
        if inputs.ref_logprobs is None:
            raise ValueError(f"algorithm.kl_loss_fn is {kl_name!r} but LossInputs.ref_logprobs is None")
        kl_mat = KL_LOSS_FNS[kl_name](inputs.logprobs, inputs.ref_logprobs, inputs.old_logprobs)
        kl_loss = aggregate(kl_mat, inputs, agg_mode, scale)
        loss = loss + kl_coef * kl_loss
        metrics["kl_loss"] = kl_loss.item()

    ent = _entropy_term(algorithm)
    if ent is not None and inputs.entropy is None:
        raise ValueError(f"algorithm.entropy_loss_fn is {ent[0]!r} but LossInputs.entropy is None")
    if inputs.entropy is not None:
        ent_name = ent[0] if ent is not None else "default"
        matrix, over = ENTROPY_LOSS_FNS[ent_name](inputs)
        entropy = aggregate(matrix, over, agg_mode, scale)
        if ent is not None:
            loss = loss - ent[1] * entropy
        metrics["entropy"] = entropy.item()

    metrics["loss"] = loss.item()
    return loss, metrics
