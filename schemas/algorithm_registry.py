"""Per-function argument schemas and per-algorithm presets (names and defaults as in Trinity-RFT).

`algorithm.<kind>_fn_args` is validated against the argument model registered here for the chosen
function: an unknown key is an error naming `algorithm.<kind>_fn_args.<key>`, and every argument the
user left out is filled in with its default (listed in `ExperimentConfig.derived`). The numerical
implementations live in `algorithms/`; this module only describes their settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from schemas.base import Section

LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


class NoArgs(Section):
    """A function without arguments."""


# ----------------------------------------------------------------------------- policy losses
class PPOPolicyLossArgs(Section):
    """PPO-clip policy loss (with dual clip)."""

    clip_range: float = Field(0.2, gt=0, description="Symmetric clip range ε of the importance ratio.")
    clip_range_low: float | None = Field(
        None, gt=0, description="Lower clip range (ratio ≥ 1-clip_range_low); None: clip_range (derived)."
    )
    clip_range_high: float | None = Field(
        None, gt=0, description="Upper clip range (ratio ≤ 1+clip_range_high); None: clip_range (derived)."
    )
    clip_ratio_c: float = Field(3.0, gt=1.0, description="Dual-clip bound for negative advantages (> 1).")
    loss_agg_mode: LossAggMode = Field("token-mean", description="How token losses are aggregated.")
    enable_sequence_masking: bool = Field(
        False, description="Mask negative-advantage tokens of sequences whose KL exceeds delta_sequence_masking."
    )
    delta_sequence_masking: float = Field(0.1, ge=0, description="Sequence KL threshold for sequence masking.")


class GSPOPolicyLossArgs(Section):
    """GSPO (sequence-level importance ratio) policy loss."""

    clip_range: float | None = Field(None, gt=0, description="Symmetric clip range; overridden by low/high.")
    clip_range_low: float | None = Field(0.0003, gt=0, description="Lower clip range of the sequence ratio.")
    clip_range_high: float | None = Field(0.0004, gt=0, description="Upper clip range of the sequence ratio.")
    loss_agg_mode: LossAggMode = Field("seq-mean-token-mean", description="How token losses are aggregated.")


class SFTLossArgs(Section):
    """Negative log-likelihood of the response tokens."""

    loss_agg_mode: LossAggMode = Field("token-mean", description="How token losses are aggregated.")


class OPMDPolicyLossArgs(Section):
    """Online policy mirror descent loss."""

    tau: float = Field(1.0, ge=0, description="Regularisation strength τ: the loss is divided by 1 + τ.")
    loss_agg_mode: LossAggMode = Field("token-mean", description="How token losses are aggregated.")


class DPOLossArgs(Section):
    """Direct preference optimisation loss."""

    beta: float = Field(0.1, gt=0, description="Inverse temperature β of the implicit reward.")
    label_smoothing: float = Field(0.0, ge=0, lt=0.5, description="Conservative-DPO label smoothing.")


class TOPRPolicyLossArgs(Section):
    """Tapered off-policy REINFORCE loss."""

    advantage_threshold: float = Field(0.0, description="Advantages above this count as positive samples.")


class CISPOPolicyLossArgs(Section):
    """Clipped importance-sampling policy optimisation loss."""

    clip_range_low: float = Field(1.0, ge=0, description="Lower clip of the (stop-gradient) IS weight.")
    clip_range_high: float = Field(0.28, ge=0, description="Upper clip of the (stop-gradient) IS weight.")
    loss_agg_mode: LossAggMode = Field("token-mean", description="How token losses are aggregated.")


class ImportanceSamplingLossArgs(Section):
    """Importance-sampled policy gradient (used by on-policy distillation)."""

    loss_agg_mode: LossAggMode = Field("token-mean", description="How token losses are aggregated.")


# ----------------------------------------------------------------------------- advantages
class GRPOAdvantageArgs(Section):
    """Group-relative advantage: (r - mean(group)) / (std(group) + ε)."""

    epsilon: float = Field(1e-6, gt=0, description="Added to the group std to avoid division by zero.")
    std_threshold: float | None = Field(
        None, ge=0, description="Groups whose reward std is at or below this are dropped; None keeps all."
    )
    norm_adv_by_std_in_grpo: bool = Field(True, description="Divide by the group std (False: Dr. GRPO).")


class RLOOAdvantageArgs(Section):
    """Leave-one-out baseline advantage."""


class ReinforcePlusPlusAdvantageArgs(Section):
    """REINFORCE++ advantage (discounted returns, whitened over the batch)."""

    gamma: float = Field(1.0, ge=0, le=1, description="Discount factor.")


class GAEAdvantageArgs(Section):
    """PPO's generalised advantage estimation (needs a critic)."""

    gamma: float = Field(1.0, ge=0, le=1, description="Discount factor.")
    lam: float = Field(1.0, ge=0, le=1, description="GAE λ.")


class OPMDAdvantageArgs(Section):
    """OPMD group baseline advantage."""

    opmd_baseline: Literal["mean", "logavgexp"] = Field("mean", description="Group baseline.")
    tau: float = Field(1.0, gt=0, description="Temperature of the logavgexp baseline.")


class OnPolicyDistillAdvantageArgs(Section):
    """Reverse-KL-to-teacher advantage for on-policy distillation."""

    kl_coef: float = Field(1.0, ge=0, description="Scale of the teacher log-ratio advantage.")


class EpsilonOnlyArgs(Section):
    """Advantage functions whose only setting is the division guard."""

    epsilon: float = Field(1e-6, gt=0, description="Added to a std to avoid division by zero.")


# ----------------------------------------------------------------------------- KL, entropy, sampling
class KLArgs(Section):
    """KL term against the reference model (as a loss, or as a reward penalty)."""

    kl_coef: float = Field(0.001, ge=0, description="Coefficient of the KL term.")
    adaptive: bool = Field(False, description="Adapt kl_coef towards target_kl (needs target_kl and horizon).")
    target_kl: float | None = Field(None, gt=0, description="Target KL of the adaptive controller.")
    horizon: float | None = Field(None, gt=0, description="Horizon of the adaptive controller.")


class NoKLArgs(Section):
    """No KL term."""

    kl_coef: float = Field(0.0, description="Must be 0: there is no KL term.")


class EntropyArgs(Section):
    """Entropy bonus."""

    entropy_coef: float = Field(0.0, description="Coefficient of the entropy term (loss -= coef * entropy).")


class NoEntropyArgs(Section):
    """No entropy term."""

    entropy_coef: float = Field(0.0, description="Must be 0: there is no entropy term.")


class SampleArgs(Section):
    """Take the oldest untrained experiences, leaving out those sampled with weights that are too old."""

    max_staleness: int | None = Field(
        None, ge=0, description="Skip (and count) experiences sampled with weights more than this many versions "
        "older than the trainer's; None: train on every experience."
    )


class PrioritySampleArgs(SampleArgs):
    """Take the untrained experiences with the highest priority first (each is still trained once)."""

    priority_fn: Literal["newest", "largest_advantage"] = Field(
        "newest", description="newest: sampled with the newest weights first (the least stale); largest_advantage: "
        "the largest |advantage| first (the strongest learning signal)."
    )


class MixSampleArgs(Section):
    """Mix expert (SFT) data into RL batches."""

    expert_data_ratio: float = Field(0.5, ge=0, le=1, description="Fraction of each batch drawn from expert data.")


POLICY_LOSS_FNS: dict[str, type[Section]] = {
    "ppo": PPOPolicyLossArgs,
    "gspo": GSPOPolicyLossArgs,
    "sft": SFTLossArgs,
    "opmd": OPMDPolicyLossArgs,
    "dpo": DPOLossArgs,
    "topr": TOPRPolicyLossArgs,
    "cispo": CISPOPolicyLossArgs,
    "importance_sampling": ImportanceSamplingLossArgs,
}
ADVANTAGE_FNS: dict[str, type[Section]] = {
    "grpo": GRPOAdvantageArgs,
    "rloo": RLOOAdvantageArgs,
    "reinforceplusplus": ReinforcePlusPlusAdvantageArgs,
    "ppo": GAEAdvantageArgs,
    "opmd": OPMDAdvantageArgs,
    "asymre": EpsilonOnlyArgs,
    "reinforce": NoArgs,
    "remax": NoArgs,
    "on_policy_distill": OnPolicyDistillAdvantageArgs,
    "none": NoArgs,
}
KL_FNS: dict[str, type[Section]] = {
    "none": NoKLArgs,
    "k1": KLArgs,
    "k2": KLArgs,
    "k3": KLArgs,
    "low_var_kl": KLArgs,
    "abs": KLArgs,
    "corrected_k3": KLArgs,
    "mse": KLArgs,
    "k1+": KLArgs,  # "+": keep the estimator's value, take k2's gradient (veRL's straight-through variant)
    "k3+": KLArgs,
    "low_var_kl+": KLArgs,
}
ENTROPY_LOSS_FNS: dict[str, type[Section]] = {"default": EntropyArgs, "basic": EntropyArgs, "none": NoEntropyArgs}
SAMPLE_STRATEGIES: dict[str, type[Section]] = {
    "default": SampleArgs,  # the oldest untrained experiences first
    "warmup": SampleArgs,  # Trinity's name; its SFT warm-up data is a stage here, so it is the default order
    "priority": PrioritySampleArgs,
    "mix": MixSampleArgs,
}

# Which registry checks each `<name>` / `<name>_args` pair of AlgorithmConfig.
FUNCTION_REGISTRIES: dict[str, dict[str, type[Section]]] = {
    "sample_strategy": SAMPLE_STRATEGIES,
    "policy_loss_fn": POLICY_LOSS_FNS,
    "advantage_fn": ADVANTAGE_FNS,
    "kl_loss_fn": KL_FNS,
    "kl_penalty_fn": KL_FNS,
    "entropy_loss_fn": ENTROPY_LOSS_FNS,
}

# Advantage functions that compare the responses of one task with each other (need repeat_times ≥ 2
# and batches made of whole groups).
GROUP_ADVANTAGE_FNS = frozenset({"grpo", "rloo", "opmd", "asymre", "reinforce"})


@dataclass(frozen=True)
class AlgorithmPreset:
    """What `algorithm_type` implies. Values fill only the fields the user left unset."""

    defaults: dict[str, object]
    compute_advantage_in_trainer: bool = False  # advantages need trainer-side tensors (critic, ref, batch)
    use_critic: bool = False
    needs_rollout: bool = True  # False: learns from a dataset only (sft, dpo)
    notes: tuple[str, ...] = field(default_factory=tuple)


_BASE = {
    "sample_strategy": "warmup",
    "policy_loss_fn": "ppo",
    "advantage_fn": "ppo",
    "kl_penalty_fn": "none",
    "kl_loss_fn": "k2",
    "entropy_loss_fn": "default",
}


def _preset(**overrides: object) -> dict[str, object]:
    return {**_BASE, **overrides}


ALGORITHM_PRESETS: dict[str, AlgorithmPreset] = {
    "sft": AlgorithmPreset(
        _preset(sample_strategy="default", policy_loss_fn="sft", advantage_fn="none", kl_loss_fn="none",
                entropy_loss_fn="none", repeat_times=1),
        needs_rollout=False,
    ),
    "raft": AlgorithmPreset(
        _preset(sample_strategy="default", policy_loss_fn="sft", advantage_fn="none", kl_loss_fn="none",
                entropy_loss_fn="none", repeat_times=1),
    ),
    "ppo": AlgorithmPreset(_preset(repeat_times=1), compute_advantage_in_trainer=True, use_critic=True),
    "grpo": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="grpo")),
    "gspo": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="grpo", policy_loss_fn="gspo", kl_loss_fn="none")),
    "rloo": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="rloo"), compute_advantage_in_trainer=True),
    "reinforceplusplus": AlgorithmPreset(
        _preset(repeat_times=2, advantage_fn="reinforceplusplus"), compute_advantage_in_trainer=True
    ),
    "opmd": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="opmd", policy_loss_fn="opmd")),
    "asymre": AlgorithmPreset(
        _preset(repeat_times=2, advantage_fn="asymre", policy_loss_fn="opmd", kl_loss_fn="none",
                entropy_loss_fn="none")
    ),
    "topr": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="reinforce", policy_loss_fn="topr")),
    "cispo": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="grpo", policy_loss_fn="cispo")),
    "dpo": AlgorithmPreset(
        _preset(repeat_times=2, policy_loss_fn="dpo", advantage_fn="none"), needs_rollout=False
    ),
    "on_policy_distill": AlgorithmPreset(
        _preset(repeat_times=1, advantage_fn="on_policy_distill", policy_loss_fn="importance_sampling",
                kl_loss_fn="none", entropy_loss_fn="none", sample_strategy="default"),
        compute_advantage_in_trainer=True,
    ),
}
