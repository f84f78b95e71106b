"""`explorer`: rollout engines and the runners that execute workflows."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.base import Section


class InferenceModelConfig(Section):
    """An inference engine group (vLLM on Ray actors, or Tinker sampling)."""

    model_path: str | None = Field(
        None, description="Only for auxiliary models; the rollout model always serves model.model_path."
    )
    engine_type: Literal["vllm", "tinker"] = Field("vllm", description="Engine implementation.")
    engine_num: int = Field(1, ge=1, description="Number of engines.")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per engine.")
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="Fraction of GPU memory (on CPU: of host RAM) the engine reserves."
    )
    kv_cache_memory_gb: float | None = Field(
        None,
        gt=0,
        description="KV cache size in GiB, instead of sizing it from gpu_memory_utilization. Set it on CPU: "
        "there vLLM takes the fraction of the NUMA node's RAM and subtracts what the engine process already "
        "holds, which fails on small nodes.",
    )
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = Field("bfloat16", description="Weights dtype.")
    seed: int = Field(42, description="Sampling seed.")
    enforce_eager: bool = Field(False, description="Disable graph capture (faster start, needed on CPU).")
    enable_prefix_caching: bool = Field(True, description="Reuse KV cache of shared prompt prefixes.")
    enable_chunked_prefill: bool = Field(True, description="Chunk long prefills.")
    enable_thinking: bool = Field(False, description="Chat-template thinking mode (Qwen3).")
    enable_history: bool = Field(False, description="Record request history (for workflows that need it).")
    enable_openai_api: bool = Field(False, description="Expose an OpenAI-compatible API to workflows.")


class ExplorerConfig(Section):
    """The explorer: engines, workflow runners, evaluation cadence."""

    runner_per_model: int = Field(8, ge=1, description="Concurrent workflow runners per rollout engine.")
    max_timeout: int = Field(1800, ge=1, description="Seconds one task may run before it is failed.")
    max_retry_times: int = Field(2, ge=0, description="Retries of a failed or timed-out task.")
    eval_interval: int = Field(100, ge=1, description="Evaluate every this many explore steps.")
    eval_on_startup: bool = Field(True, description="Evaluate before the first step.")
    rollout_model: InferenceModelConfig = Field(
        default_factory=InferenceModelConfig, description="Engines that serve the policy."
    )
    auxiliary_models: list[InferenceModelConfig] = Field(
        default_factory=list, description="Extra engines workflows may call (judges, teachers); model_path required."
    )
