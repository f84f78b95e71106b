"""`algorithm`: the RL algorithm, its loss/advantage/KL functions and the optimizer.

Function fields left unset take the preset of `algorithm_type` (see `schemas.algorithm_registry`);
`*_args` dicts are checked against the chosen function and completed with its defaults. Both happen
in `ExperimentConfig` validation and are listed in `ExperimentConfig.derived`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from schemas.algorithm_registry import FUNCTION_REGISTRIES, FUNCTION_SETTINGS, NOT_BUILT
from schemas.base import Entry, Section, honoured, per_trainer, validated
from schemas.trinity.names import ALGORITHM_TYPE_ALIASES


def _functions(kind: str, what: str, notes: dict[str, str]) -> str:
    """A function field's description, its names taken from the registries (so it cannot name a function that is
    not there, or call one refused that trains): the names built, with `notes`, then the ones refused."""
    refused = NOT_BUILT.get(kind, {})
    if stale := set(notes) - set(FUNCTION_REGISTRIES[kind]):
        raise ValueError(f"notes on {kind} name functions it does not have: {sorted(stale)}")
    built = ", ".join(f"{name} ({notes[name]})" if name in notes else name
                      for name in FUNCTION_REGISTRIES[kind] if name not in refused)
    refusal = f"; refused: {', '.join(refused)} (docs/trinity-parity.md)" if refused else ""
    return f"{what}: {built}{refusal}; None: preset."


class OptimizerConfig(Section):
    """Optimizer and learning-rate schedule of the policy."""

    # Each trainer backend runs its own optimizer (schemas/trainer_base.py: TrainerBase.ALGORITHM_SETTINGS).
    SETTINGS: ClassVar[dict[str, Entry]] = {
        "lr": per_trainer(),
        "lr_warmup_steps": per_trainer(),
        "lr_warmup_steps_ratio": per_trainer(),
        "min_lr_ratio": per_trainer().warn_if(
            lambda v, c: v and c.algorithm.optimizer.lr_scheduler_type == "constant",
            "has no effect with lr_scheduler_type 'constant' (only cosine decays to it)"),
        "lr_scheduler_type": per_trainer(),
        "optimizer_type": per_trainer(),
        "betas": per_trainer(),
        "eps": per_trainer(),
        "weight_decay": per_trainer(),
    }

    lr: float = Field(1e-6, gt=0, description="Peak learning rate.")
    lr_warmup_steps: int = Field(
        -1, ge=-1, description="Linear warm-up steps; -1: use lr_warmup_steps_ratio × total training steps."
    )
    lr_warmup_steps_ratio: float = Field(0.0, ge=0, le=1, description="Warm-up as a fraction of all training steps.")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Final lr as a fraction of lr (cosine schedule).")
    lr_scheduler_type: Literal["constant", "cosine"] = Field(
        "constant", description="Schedule after warm-up (Trinity's alias: warmup_style)."
    )
    optimizer_type: Literal["adam", "adamw"] = Field(
        "adam", description="Optimizer; both apply decoupled weight decay (AdamW) as veRL does."
    )
    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam β1, β2.")
    eps: float = Field(1e-8, gt=0, description="Adam ε.")
    weight_decay: float = Field(0.01, ge=0, description="Decoupled weight decay.")

    @model_validator(mode="before")
    @classmethod
    def _alias_warmup_style(cls, data: Any) -> Any:
        if isinstance(data, dict) and "warmup_style" in data:
            data = dict(data)
            if "lr_scheduler_type" in data and data["lr_scheduler_type"] != data["warmup_style"]:
                raise ValueError(
                    "algorithm.optimizer.warmup_style is Trinity's alias of lr_scheduler_type; "
                    "set only one of them"
                )
            data["lr_scheduler_type"] = data.pop("warmup_style")
        return data


# veRL's names for the value whose spread decides (algorithm.filter_groups.metric), and ours.
FILTER_METRIC_ALIASES = {"score": "reward", "seq_reward": "reward", "seq_final_reward": "reward", "acc": "accuracy"}


class FilterGroupsConfig(Section):
    """DAPO's dynamic sampling (veRL's `algorithm.filter_groups`): a step keeps only groups whose rewards differ,
    sampling more batches of tasks until `buffer.batch_size` such groups are in (buffer/dynamic_sampling.py)."""

    # dynamic sampling lives on the explore side, so every trainer backend gets it (docs/dapo.md)
    SETTINGS: ClassVar[dict[str, Entry]] = {"gen_batch_size": honoured().warn_if(
        lambda v, c: v and not c.algorithm.filter_groups.enable,
        "has no effect without dynamic sampling (algorithm.filter_groups.enable)")}

    enable: bool | None = Field(
        None, description="Drop groups whose responses all got the same metric value and sample more tasks to "
        "fill the step; None: the preset's value (on for dapo, off for the others)."
    )
    metric: Literal["reward", "accuracy"] = Field(
        "reward", description="The value whose spread within a group decides: reward (what the advantage uses) or "
        "accuracy (the workflow's reward breakdown). veRL's score, seq_reward, seq_final_reward mean reward; acc "
        "means accuracy."
    )
    max_num_gen_batches: int = Field(
        4, ge=1, description="Batches of gen_batch_size tasks an explore step may sample, the first included; "
        "a step still short of informative groups after them trains on those it has. veRL's 0 (no limit) is refused."
    )
    gen_batch_size: int | None = Field(
        None, ge=1, description="Tasks a round samples (veRL's data.gen_batch_size); None: buffer.batch_size. Above "
        "batch_size, one larger round can fill a step that would take several when most groups agree (on a CPU "
        "engine no faster per task: docs/dapo.md). Keep it when resuming: it sets where each step's tasks start."
    )

    @model_validator(mode="before")
    @classmethod
    def _verl_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if isinstance(data.get("metric"), str) and data["metric"] in FILTER_METRIC_ALIASES:
            data = {**data, "metric": FILTER_METRIC_ALIASES[data["metric"]]}
        bound = data.get("max_num_gen_batches")
        if isinstance(bound, int) and not isinstance(bound, bool) and bound < 1:
            raise ValueError(f"max_num_gen_batches {bound}: give a bound ≥ 1 (veRL's 0, no "
                             "limit, would sample forever from a policy whose groups are all equal)")
        return data


class AlgorithmConfig(Section):
    """The RL algorithm. Unset function fields come from the `algorithm_type` preset."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "algorithm_type": honoured(note=(
            "its preset fills the function fields; a preset without rollouts (sft, dpo) in mode train learns from a "
            "dataset (schemas/stage_kind.py), which picks the flow and the data checked")),
        # KL as a reward penalty: applied by the trainers that hold the reference (backends/reward_kl.py)
        "kl_penalty_fn[none]": honoured(note="is_off"),
        "kl_penalty_fn[none].kl_coef": validated(note="must be 0 with 'none'"),
        **FUNCTION_SETTINGS,  # each function of a registry and its arguments (schemas/algorithm_registry.py)
    }

    algorithm_type: str = Field(
        "ppo",
        description="Algorithm preset: grpo, ppo, rloo, reinforceplusplus, gspo, opmd, asymre, topr, cispo, "
        "sft, raft, dpo, on_policy_distill, m2po, dapo (Trinity's), dapo_full (ours), ... (docs/trinity-parity.md). It "
        "fills every function field left unset. Trinity's grpo_verl is grpo.",
    )
    repeat_times: int | None = Field(
        None, ge=1, description="Responses sampled per task (group size); None: the preset's value."
    )
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Optimizer and lr schedule.")
    sample_strategy: str | None = Field(
        None, description="How the trainer takes experiences from the buffer: default (oldest first), warmup "
        "(the same here), staleness_control (the same, Trinity's name), priority (sample_strategy_args.priority_fn), mix "
        "(the oldest plus expert rows, docs/mix.md); None: preset."
    )
    sample_strategy_args: dict[str, Any] | None = Field(
        None, description="Arguments of sample_strategy; missing ones take the strategy's defaults."
    )
    policy_loss_fn: str | None = Field(None, description=_functions("policy_loss_fn", "Policy loss", {
        "ppo": "PPO-clip", "dpo": "preference pairs, docs/dpo.md", "mix": "expert rows, docs/mix.md",
        "mix_chord": "expert rows, docs/mix.md", "topk_distill": "a teacher's top-k log-probs, docs/distill.md"}))
    policy_loss_fn_args: dict[str, Any] | None = Field(
        None, description="Arguments of policy_loss_fn (e.g. ppo: clip_range, clip_range_low, clip_range_high, "
        "clip_ratio_c, loss_agg_mode; dpo: beta, label_smoothing; topk_distill: topk); missing ones take the function's defaults."
    )
    advantage_fn: str | None = Field(None, description=_functions("advantage_fn", "Advantage estimator", {
        "ppo": "GAE over a critic's values, docs/ppo.md", "on_policy_distill": "a teacher's log-probs, docs/distill.md",
        "jsd": "a teacher's log-probs, docs/distill.md"}))
    advantage_fn_args: dict[str, Any] | None = Field(
        None, description="Arguments of advantage_fn (e.g. grpo: epsilon, std_threshold, norm_adv_by_std_in_grpo)."
    )
    kl_loss_fn: str | None = Field(None, description=_functions("kl_loss_fn", "KL-to-reference term in the loss", {}))
    kl_loss_fn_args: dict[str, Any] | None = Field(
        None, description="Arguments of kl_loss_fn (kl_coef; adaptive applies to kl_penalty_fn only)."
    )
    kl_penalty_fn: str | None = Field(
        None, description="KL-to-reference penalty subtracted from the reward before the advantages, per token "
        "(Trinity's estimators: none, k1, k2, k3, low_var_kl, abs, corrected_k3; veRL's others too). The reference is "
        "model.ref_model_path, by default the model the stage starts from. Torch and veRL trainers; None: preset "
        "(none). docs/kl.md."
    )
    kl_penalty_fn_args: dict[str, Any] | None = Field(
        None, description="Arguments of kl_penalty_fn: kl_coef, and adaptive with target_kl and horizon (the "
        "coefficient then follows a proportional controller toward target_kl; resumed runs go on with it)."
    )
    entropy_loss_fn: str | None = Field(None, description=_functions("entropy_loss_fn", "Entropy term", {
        "mix": "the sampled rows only, docs/mix.md"}))
    entropy_loss_fn_args: dict[str, Any] | None = Field(
        None, description="Arguments of entropy_loss_fn (entropy_coef)."
    )
    filter_groups: FilterGroupsConfig = Field(
        default_factory=FilterGroupsConfig, description="Dynamic sampling (DAPO; veRL's filter_groups): drop groups "
        "with all-equal rewards and sample more tasks to fill the step."
    )

    @model_validator(mode="before")
    @classmethod
    def _trinity_names(cls, data: Any) -> Any:
        """Trinity's other names of a preset (schemas/trinity/names.py): grpo_verl is grpo."""
        name = data.get("algorithm_type") if isinstance(data, dict) else None
        if isinstance(name, str) and name in ALGORITHM_TYPE_ALIASES:  # any other type: the field's own error
            data = {**data, "algorithm_type": ALGORITHM_TYPE_ALIASES[data["algorithm_type"]]}
        return data
