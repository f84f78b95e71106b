"""`model`: the policy model, its context lengths and LoRA (Tinker's settings are the trainer's)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from algorithms import needs_critic
from schemas.base import Entry, Section, honoured, resolved, warned

NO_CRITIC = "no critic is trained: only advantage_fn 'ppo' (GAE, the ppo preset) uses one; the setting has no effect"


class LoRAConfig(Section):
    """A LoRA adapter trained on the policy (veRL/torch trainers; vLLM serves it)."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "name": warned("adapters are merged into the weights the engines serve: no adapter is served by name"),
        "path": honoured(note="the adapter training starts from"),
        "base_model_name": warned(
            "adapters are merged into the weights the engines serve; the base model is model.model_path"),
        "lora_dtype": honoured().refuse_if(
            lambda v, c: v not in ("auto", "float32", "bfloat16", "float16"), "one of auto, float32, bfloat16, float16"),
    }

    name: str | None = Field(None, description="Adapter name served by the rollout engine.")
    path: str | None = Field(None, description="Initial adapter folder; None: a fresh adapter is created.")
    base_model_name: str | None = Field(None, description="Base model name the adapter belongs to.")
    lora_rank: int = Field(32, ge=1, description="LoRA rank r.")
    lora_alpha: int = Field(32, ge=1, description="LoRA α (scale α/r).")
    lora_dtype: str = Field("auto", description="Adapter dtype; auto: the model's dtype.")
    target_modules: str | list[str] = Field(
        "all-linear", description="Modules that get adapters: 'all-linear' or a list of module names."
    )


class ModelConfig(Section):
    """The policy model and its token budget."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "ref_model_path": honoured(note="trainer checks: schemas/trainer.py (Tinker refuses it, veRL with LoRA too)"),
        "critic_model_path": honoured().warn_if(lambda v, c: not needs_critic(c.algorithm), NO_CRITIC),
        "temperature": resolved("buffer.explorer_input.taskset.rollout_args.temperature"),
        "top_p": resolved("buffer.explorer_input.taskset.rollout_args.top_p"),
        "top_k": resolved("buffer.explorer_input.taskset.rollout_args.top_k"),
        "logprobs": warned("engines record the sampled token's logprob only; top logprobs are not kept",
                           when=lambda v, c: v > 0),
        "max_prompt_tokens": honoured(note="longer prompts are skipped and counted (explore/prompts_too_long)"),
    }

    model_path: str | None = Field(
        None,
        description="Hugging Face model id or local folder of the policy (required). A stage after a training "
        "stage defaults to the previous stage's final model.",
    )
    ref_model_path: str | None = Field(
        None,
        description="Reference model of the KL terms (algorithm.kl_loss_fn, algorithm.kl_penalty_fn): a Hugging Face "
        "id or local folder. None (the default): the model this stage starts from, i.e. model_path; in a staged run "
        "(e.g. SFT warm-up then GRPO) that is the previous stage's output, the warm-up's model, not the original base.",
    )
    critic_model_path: str | None = Field(
        None, description="The critic's starting model (advantage_fn 'ppo', GAE: docs/ppo.md); None: model_path."
    )
    custom_chat_template: str | None = Field(None, description="Jinja chat template replacing the tokenizer's.")
    temperature: float = Field(1.0, ge=0, description="Default sampling temperature of tasksets' rollout_args.")
    top_p: float = Field(1.0, gt=0, le=1, description="Default top-p of tasksets' rollout_args.")
    top_k: int = Field(-1, ge=-1, description="Default top-k of tasksets' rollout_args (-1: off).")
    logprobs: int = Field(0, ge=0, description="Default number of top logprobs returned per token.")
    max_model_len: int | None = Field(
        None, ge=1, description="Context length of the engines; None: max_prompt_tokens + max_response_tokens."
    )
    max_prompt_tokens: int | None = Field(
        None, ge=1, description="Longest prompt; None: max_model_len - max_response_tokens (derived)."
    )
    max_response_tokens: int | None = Field(
        None, ge=1, description="Longest response; None: max_model_len - max_prompt_tokens (derived)."
    )
    min_response_tokens: int = Field(1, ge=0, description="Shortest response the engine generates.")
    lora_configs: list[LoRAConfig] | None = Field(
        None, description="LoRA adapters to train (at most one); None: full fine-tuning. Tinker trains its own "
        "(trainer.rank)."
    )
