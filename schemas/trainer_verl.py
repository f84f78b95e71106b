"""veRL's trainer settings: its FSDP workers' knobs, the losses it runs as its own and ours inside its ppo_loss, its
rules (schemas/trainer_base.py says what every trainer's class declares)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from algorithms import POLICY_LOSS_FNS, has_kl_term, is_preference_loss
from algorithms.kl import VERL_ESTIMATORS
from algorithms.registry import Need
from schemas.base import Entry, honoured, refused, warned
from schemas.resolver import Resolver
from schemas.stage_kind import stage_kind

if TYPE_CHECKING:
    from schemas.explorer import InferenceBase
    from schemas.sections import Sections

from schemas.trainer_base import CRITIC_SETTINGS, CriticConfig, TrainerBase, critic_field


class VerlTrainerConfig(TrainerBase):
    """veRL's FSDP training engine (its engine workers on Ray), CPU for tests or GPUs."""

    # The losses veRL has of its own: our policy_loss_fn -> a policy_loss.loss_mode of its ppo_loss, or "sft" (its
    # sft loss, read the way ppo_loss reads the batch: backends/verl/losses.py). Every other loss it runs is ours:
    # as the rft_<name> loss mode of its ppo_loss when it needs nothing more than ppo_loss hands a policy loss
    # (log-probs, advantages, the response mask), else whole as the engine's loss (`runs_whole`).
    LOSS_MODES: ClassVar[Mapping[str, str]] = {"ppo": "vanilla", "gspo": "gspo", "cispo": "cispo", "sft": "sft"}
    CANNOT: ClassVar[Mapping[Need, str]] = {
        "batch_mask": "veRL's engine computes the loss one micro-batch at a time, with no pass over the whole batch's "
                      "log-probs before it",
        "teacher_topk": "veRL's engine hands a loss the sampled tokens' log-probs only, not the whole distribution",
    }
    KL_LOSSES: ClassVar[Collection[str]] = VERL_ESTIMATORS  # veRL's own kl_penalty computes the term
    DEVICES_IN_WORKERS: ClassVar[bool] = True  # veRL's engine workers
    MODULES: ClassVar[tuple[str, ...]] = ("backends/verl/", "algorithms/verl_compat.py", "algorithms/policy_loss/")
    SETTINGS: ClassVar[dict[str, Entry]] = {
        "strategy": honoured(passthrough=True),
        "attn_implementation": honoured(passthrough=True),
        "trainer_config": honoured(note="veRL's own tree, merged last"),
        **CRITIC_SETTINGS,
    }
    ALGORITHM_SETTINGS: ClassVar[dict[str, Entry]] = {
        "algorithm.optimizer.lr_scheduler_type": honoured(passthrough=True, note="veRL's schedulers have the same names"),
        "algorithm.policy_loss_fn[*].loss_agg_mode": honoured(passthrough=True, note="veRL's agg_loss modes have the same names"),
        "algorithm.policy_loss_fn[ppo].enable_sequence_masking": refused(
            "veRL's ppo loss has no sequence masking; turn it off or use trainer_type 'torch'"),
        "algorithm.policy_loss_fn[ppo].delta_sequence_masking": warned(
            "has no effect: veRL's ppo loss has no sequence masking"),
        "algorithm.policy_loss_fn[sft].loss_agg_mode": refused(
            "veRL's sft loss is a token mean over the batch; use token-mean or trainer_type 'torch'"),
    }

    trainer_type: Literal["verl"] = Field("verl", description="veRL FSDP workers.")
    use_dynamic_bsz: bool = Field(True, description="Pack micro-batches by token count.")
    max_token_len_per_gpu: int | None = Field(
        None, ge=1, description="Token budget per micro-batch with use_dynamic_bsz; None: 2 × model.max_model_len."
    )
    ulysses_sequence_parallel_size: int = Field(
        1, ge=1, description="Sequence-parallel degree (needs use_remove_padding; heads must divide by it)."
    )
    strategy: Literal["fsdp2", "fsdp"] = Field(
        "fsdp2", description="veRL's FSDP version: fsdp2 (fully_shard, CPU and GPU) or fsdp (FSDP1, GPUs only)."
    )
    cpu_workers: int = Field(
        1, ge=1, description="Training processes on a cluster without GPUs (FSDP over gloo); on GPUs there is one "
        "per trainer GPU (the cluster's GPUs minus the rollout engines')."
    )
    model_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="Dtype the weights are loaded, kept and optimised in (veRL's fsdp_config.model_dtype)."
    )
    param_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Compute dtype of forward and backward (FSDP mixed precision); auto: bfloat16 on GPUs "
        "(veRL's default), float32 on CPU."
    )
    gradient_checkpointing: bool = Field(True, description="Recompute activations in backward to save memory.")
    use_remove_padding: bool = Field(
        True, description="Pack the batch's sequences into one row without padding (varlen attention)."
    )
    attn_implementation: Literal["auto", "sdpa", "flash_attention_2", "eager"] = Field(
        "auto", description="Attention kernel of the trained model; auto: flash_attention_2 on GPUs where the "
        "flash_attn package is installed, else sdpa."
    )
    use_torch_compile: bool | None = Field(
        None, description="torch.compile veRL's entropy-from-logits; None: on GPUs, off on CPU (compiling costs more "
        "than it saves there)."
    )
    fsdp_size: int = Field(
        -1, description="Ranks one copy of the model is sharded over (-1: all; fewer makes HSDP replicas)."
    )
    param_offload: bool = Field(False, description="Keep parameters in CPU memory between forward/backward passes.")
    optimizer_offload: bool = Field(False, description="Keep the optimizer state in CPU memory between steps.")
    seed: int = Field(42, description="Seed of the workers' torch RNG before the model is built (LoRA initialisation).")
    trainer_config: dict[str, Any] = Field(
        default_factory=dict,
        description="veRL's own config tree, merged last over what the other settings map to "
        "(Trinity's trainer.trainer_config), e.g. {actor_rollout_ref: {actor: {...}}}.",
    )
    critic: CriticConfig = critic_field()  # veRL's critic section (its value-model engine), before trainer_config

    @staticmethod
    def runs_whole(name: str | None) -> bool:
        """Losses veRL's ppo_loss cannot carry, run whole (with their KL and entropy terms) as the engine's loss
        (backends/verl/losses.py): those that need more than ppo_loss hands a policy loss — the reference's log-probs
        (dpo), pairs of rows kept together (dpo), expert rows beside the sampled ones (the mix family)."""
        return bool(POLICY_LOSS_FNS.needs_of(name))

    @classmethod
    def adapted(cls, name: str | None) -> bool:
        """Ours, run as the rft_<name> loss mode of veRL's ppo_loss (backends/verl/losses.py)."""
        return name in cls.policy_losses() and name not in cls.LOSS_MODES and not cls.runs_whole(name)

    def check(self, r: Resolver[Sections], rollout: InferenceBase) -> None:
        """What veRL can train: its own loss functions, FSDP2 on CPU, sequence parallel over packed sequences."""
        c = r.config
        if not stage_kind(c).trains:
            return
        alg = c.algorithm
        if is_preference_loss(alg.policy_loss_fn):  # (chosen, rejected) rows must reach the loss side by side
            splits = (f"veRL packs micro-batches by token count, which splits the (chosen, rejected) pairs of "
                      f"{alg.policy_loss_fn!r}")
            if self.use_dynamic_bsz and "use_dynamic_bsz" in self.model_fields_set:
                r.error("trainer.use_dynamic_bsz", f"{splits}; set false (fixed micro-batches, in order)")
            elif self.use_dynamic_bsz:
                r.derive(self, "use_dynamic_bsz", False, "trainer.use_dynamic_bsz",
                         f"{splits}: fixed micro-batches of trainer.micro_batch_size rows, in order")
            if self.micro_batch_size % 2 and "micro_batch_size" in self.model_fields_set:
                r.error("trainer.micro_batch_size", f"{self.micro_batch_size}: {alg.policy_loss_fn!r} trains whole "
                        "(chosen, rejected) pairs; use an even size")
            elif self.micro_batch_size % 2:
                r.derive(self, "micro_batch_size", 2, "trainer.micro_batch_size",
                         f"{alg.policy_loss_fn!r} trains whole (chosen, rejected) pairs: one pair a micro-batch")
        if has_kl_term(alg) and alg.kl_loss_fn not in self.KL_LOSSES:
            r.error("algorithm.kl_loss_fn", f"{alg.kl_loss_fn!r} has no veRL estimator; with trainer_type 'verl' use "
                    f"one of {', '.join(self.KL_LOSSES)}")
        if c.model.ref_model_path is not None and c.model.lora_configs:
            r.error("model.ref_model_path", "with LoRA the veRL trainer's reference is the actor with its adapter off "
                    "(the base model); another reference model is not loaded; unset ref_model_path or use trainer_type "
                    "'torch'")
        if self.ulysses_sequence_parallel_size > 1 and not self.use_remove_padding:
            r.error("trainer.ulysses_sequence_parallel_size",
                    f"{self.ulysses_sequence_parallel_size} needs trainer.use_remove_padding: true (veRL splits packed "
                    "sequences)")
        if self.strategy == "fsdp" and c.cluster.gpu_per_node == 0:
            r.error("trainer.strategy", "'fsdp' (FSDP1) needs GPUs; use 'fsdp2' on CPU")
