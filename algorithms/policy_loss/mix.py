"""The mix family (Trinity-RFT's `mix` and `mix_chord`): one loss over a batch of the policy's own samples and
expert (SFT) rows that the `mix` sample strategy adds to it (tasks/train.py, `LossInputs.expert_mask`):

    loss = (1 − μ) · PPO-clip(sampled rows) + μ · SFT(expert rows)

Each part is normalised over its own rows of the whole batch (`LossInputs.rows`), so the expert share of the
batch does not rescale either part. `mix` has a fixed μ and plain NLL on the expert rows. `mix_chord` (CHORD,
Zhang et al. 2025) moves μ on a schedule (a linear warm-up to `mu_peak`, then a cosine decay to `mu_valley`)
and weights each expert token's NLL by φ(p) = p·(1 − p) (`sft_phi`), so tokens the policy already
finds near-certain or near-impossible pull less.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.policy_loss.base import register_policy_loss_fn
from algorithms.policy_loss.ppo import PPOArgs, ppo
from algorithms.policy_loss.sft import sft
from algorithms.policy_loss.sft_phi import sft_phi

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class MixArgs(PPOArgs):
    """PPO-clip on the sampled rows, NLL on the expert rows, weighted (1 − μ) and μ."""

    mu: float = Field(0.1, ge=0, le=1, description="Weight of the expert rows' SFT loss (the sampled rows' PPO "
                      "loss has 1 − mu).")
    use_token_level_loss_in_sft: bool = Field(
        False, description="Expert rows' NLL averaged over their tokens (loss_agg_mode); False: per sequence "
        "first (seq-mean-token-mean), Trinity's default for mix.")


class ChordArgs(PPOArgs):
    """CHORD: mix with a scheduled μ and (by default) φ-weighted expert tokens."""

    mu_warmup_steps: int = Field(0, ge=0, description="Steps over which μ rises linearly from 0 to mu_peak.")
    mu_decay_steps: int = Field(0, ge=0, description="Steps of the cosine decay from mu_peak to mu_valley after "
                                "the warm-up (0: mu_valley right after it).")
    mu_peak: float = Field(0.1, ge=0, le=1, description="μ at the end of the warm-up.")
    mu_valley: float = Field(0.1, ge=0, le=1, description="μ after the decay.")
    enable_phi_function: bool = Field(
        True, description="Weight each expert token's NLL by φ(p) = p·(1 − p) (CHORD-φ; sft_phi); False: plain "
        "NLL (CHORD-μ).")
    use_token_level_loss_in_sft: bool = Field(
        True, description="Expert rows' loss averaged over their tokens (loss_agg_mode); False: per sequence first.")


def chord_mu(step: int, args: dict[str, Any]) -> float:
    """μ at train step `step`: a linear warm-up to mu_peak over mu_warmup_steps, then a cosine decay to
    mu_valley over mu_decay_steps (Trinity's mu_schedule_function)."""
    warmup, decay = int(args["mu_warmup_steps"]), int(args["mu_decay_steps"])
    peak, valley = float(args["mu_peak"]), float(args["mu_valley"])
    if step < warmup:
        return step / warmup * peak
    if step >= warmup + decay:
        return valley
    return valley + (peak - valley) * 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / decay))


def _expert_loss_args(args: dict[str, Any]) -> dict[str, Any]:
    agg = args["loss_agg_mode"] if args["use_token_level_loss_in_sft"] else "seq-mean-token-mean"
    return {"loss_agg_mode": agg, "use_token_level_loss": True, "cutoff_prob": 1.0,
            "loss_scale_factor": args.get("loss_scale_factor")}


def mixed(
    inputs: LossInputs, args: dict[str, Any], mu: float, expert_loss: Callable[..., tuple[torch.Tensor, dict[str, float]]]
) -> tuple[torch.Tensor, dict[str, float]]:
    """(1 − mu) · PPO over the sampled rows + mu · `expert_loss` over the expert rows."""
    if inputs.expert_mask is None:
        raise ValueError("algorithm.policy_loss_fn: a mix loss needs expert rows in the batch "
                         "(algorithm.sample_strategy 'mix')")
    experts = int(inputs.expert_mask.sum())
    zero = inputs.logprobs.sum() * 0.0  # an empty part adds nothing, on the same graph
    usual, expert = zero, zero
    metrics: dict[str, float] = {}
    if experts < inputs.logprobs.shape[0]:
        usual, usual_metrics = ppo(inputs.rows(expert=False), {k: args[k] for k in PPOArgs.model_fields})
        metrics |= {f"usual/{k}": v for k, v in usual_metrics.items()}
    if experts:
        expert, expert_metrics = expert_loss(inputs.rows(expert=True), _expert_loss_args(args))
        metrics |= {f"expert/{k}": v for k, v in expert_metrics.items() if k != "pg_loss"}
    loss = (1.0 - mu) * usual + mu * expert
    return loss, {**metrics, "pg_loss": loss.item(), "mu": mu}


@register_policy_loss_fn("mix", MixArgs, needs={"expert_rows"})
def mix(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    return mixed(inputs, args, float(args["mu"]), sft)


@register_policy_loss_fn("mix_chord", ChordArgs, needs={"expert_rows"})
def mix_chord(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    return mixed(inputs, args, chord_mu(inputs.step, args), sft_phi if args["enable_phi_function"] else sft)
