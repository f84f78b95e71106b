"""`trainer`: one choice of training backend — torch, veRL or Tinker — and that backend's settings.

The section is a discriminated union on `trainer_type` (Trinity's name): each variant holds the
settings shared by every trainer plus its own, so a setting of another backend is an error naming
it, never silently ignored. Trinity's `model.tinker.enable` maps onto `trainer_type: tinker` (see
`schemas.trinity.aliases`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Field

from schemas.base import Variant

TRAINER_TYPES = ("torch", "verl", "tinker")
DEFAULT_TRAINER_TYPE = "verl"  # Trinity-RFT's default


class TrainerBase(Variant):
    """Settings every trainer honours."""

    TAG: ClassVar[str] = "trainer_type"

    save_interval: int = Field(0, ge=0, description="Checkpoint every this many train steps (0: only at the end).")
    max_checkpoints_to_keep: int | None = Field(
        None, ge=1, description="Keep the newest this many global_step_N checkpoints; an older one is deleted once a "
        "newer one is whole (veRL's max_actor_ckpt_to_keep). None: keep all.",
    )
    save_hf_checkpoint: Literal["last", "always", "never"] = Field(
        "last", description="When to also write a Hugging Face folder (the next stage starts from the last one)."
    )
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient norm.")
    micro_batch_size: int = Field(
        1, ge=1, description="Experiences per forward/backward pass (gradients accumulate over the train batch)."
    )


class TorchTrainerConfig(TrainerBase):
    """The native torch trainer: a transformers model (optionally LoRA via peft), CPU or one GPU."""

    trainer_type: Literal["torch"] = Field("torch", description="The native torch trainer.")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Parameter and compute dtype.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when available, else cpu.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations to save memory.")
    num_threads: int | None = Field(None, ge=1, description="torch intra-op threads; None: what the policy plans.")
    skip_zero_advantage: bool = Field(
        True,
        description="Leave out of the forward/backward pass the experiences whose advantage is 0 when no KL or "
        "entropy term is on: they add nothing to the gradient, so the update is the same, only cheaper.",
    )
    share_prompt: bool = Field(
        True,
        description="Run a prompt once for all the samples of a micro-batch that share it (a GRPO group) and "
        "let every response attend to it: the same loss and gradient with fewer tokens. Off with "
        "gradient_checkpointing.",
    )


class VerlTrainerConfig(TrainerBase):
    """veRL's FSDP training engine (its engine workers on Ray), CPU for tests or GPUs."""

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


class TinkerTrainerConfig(TrainerBase):
    """Training on the Tinker service: a LoRA of `base_model`, trained and sampled remotely."""

    trainer_type: Literal["tinker"] = Field("tinker", description="The Tinker service.")
    base_model: str | None = Field(None, description="The service's name of the base model; None: model.model_path.")
    rank: int = Field(32, ge=1, description="LoRA rank.")
    seed: int | None = Field(None, description="Seed of the training client; None: the service's default.")
    train_mlp: bool = Field(True, description="Put adapters on MLP layers.")
    train_attn: bool = Field(True, description="Put adapters on attention layers.")
    train_unembed: bool = Field(True, description="Put an adapter on the unembedding (LM head).")
    loss_fn: Literal["auto", "importance_sampling", "ppo", "cispo", "custom"] = Field(
        "auto",
        description="How the policy loss runs on the service. auto: Tinker's built-in loss matching "
        "algorithm.policy_loss_fn (ppo with its clip range, cispo, importance_sampling; sft as cross_entropy), "
        "else custom; custom: our own loss through forward_backward_custom.",
    )
    base_url: str | None = Field(
        None, description="Service address; None: $TINKER_BASE_URL, else the hosted service. Never put a key here."
    )


TrainerConfig = Annotated[
    Union[TorchTrainerConfig, VerlTrainerConfig, TinkerTrainerConfig], Field(discriminator="trainer_type")
]
TRAINER_VARIANTS: dict[str, type[TrainerBase]] = {
    "torch": TorchTrainerConfig,
    "verl": VerlTrainerConfig,
    "tinker": TinkerTrainerConfig,
}
