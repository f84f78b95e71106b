"""`trainer`: the training backend (native torch, veRL or Tinker) and its batch settings."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from schemas.base import Section


class TorchTrainerConfig(Section):
    """Settings of the native torch trainer (runs on CPU or one GPU)."""

    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Parameter and compute dtype.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when available, else cpu.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations to save memory.")
    num_threads: int | None = Field(None, ge=1, description="torch intra-op threads; None: torch's default.")
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


class TinkerTrainerConfig(Section):
    """Settings of the Tinker trainer adapter."""

    loss_fn: Literal["importance_sampling", "ppo", "cross_entropy"] = Field(
        "importance_sampling", description="Tinker's built-in loss used for policy-gradient steps."
    )


class TrainerConfig(Section):
    """The trainer."""

    trainer_type: Literal["torch", "verl", "tinker"] = Field(
        "verl", description="torch: the native trainer (CPU/1 GPU); verl: veRL FSDP workers; tinker: the Tinker service."
    )
    save_interval: int = Field(0, ge=0, description="Checkpoint every this many train steps (0: only at the end).")
    save_hf_checkpoint: Literal["last", "always", "never"] = Field(
        "last", description="When to also write a Hugging Face folder (the next stage starts from the last one)."
    )
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient norm.")
    micro_batch_size: int = Field(
        1, ge=1, description="Experiences per forward/backward pass (gradients accumulate over the train batch)."
    )
    use_dynamic_bsz: bool = Field(True, description="Pack micro-batches by token count (veRL).")
    max_token_len_per_gpu: int | None = Field(
        None, ge=1, description="Token budget per micro-batch with use_dynamic_bsz; None: 2 × model.max_model_len."
    )
    ulysses_sequence_parallel_size: int = Field(1, ge=1, description="Sequence-parallel degree (veRL).")
    torch: TorchTrainerConfig = Field(default_factory=TorchTrainerConfig, description="Native torch trainer settings.")
    verl: dict[str, Any] = Field(
        default_factory=dict,
        description="veRL settings passed through (Trinity's trainer.trainer_config), e.g. {actor_rollout_ref: ...}.",
    )
    tinker: TinkerTrainerConfig = Field(default_factory=TinkerTrainerConfig, description="Tinker trainer settings.")
