"""`explorer`: rollout engines and the runners that execute workflows.

`rollout_model` (and each auxiliary model) is a discriminated union on `engine_type` (Trinity's
name): vLLM engines with their settings, or Tinker's sampler, which has none of vLLM's.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field, model_validator

from schemas.base import Section, Variant
from schemas.trinity.names import ENGINE_TYPE_ALIASES

ENGINE_TYPES = ("vllm", "tinker")
DEFAULT_ENGINE_TYPE = "vllm"


class InferenceBase(Variant):
    """Settings every rollout engine honours."""

    TAG: ClassVar[str] = "engine_type"

    model_path: str | None = Field(
        None, description="Only for auxiliary models; the rollout model always serves model.model_path."
    )
    engine_num: int = Field(1, ge=1, description="Number of engines.")
    seed: int = Field(42, description="Sampling seed.")
    enable_thinking: bool = Field(False, description="Chat-template thinking mode (Qwen3).")
    enable_openai_api: bool = Field(
        False,
        description="Serve an OpenAI-compatible chat endpoint on each engine (vLLM's own server), for agents written "
        "against the openai client; the address is in each engine's info and the serve mode's artifact.",
    )
    enable_history: bool = Field(
        False,
        description="Record the prompt/response token ids and logprobs of every endpoint call under its rollout id "
        "(base URL .../rollouts/<id>/v1 or header X-Rollout-Id), so agent workflows train on them.",
    )
    openai_api_host: str = Field("127.0.0.1", description="Address the endpoint binds (0.0.0.0: every interface).")
    openai_api_port: int = Field(0, ge=0, le=65535, description="Port of engine 0 (engine i: port + i); 0: any free port.")
    enable_auto_tool_choice: bool = Field(
        False, description="Let the model decide to call tools (tool_choice 'auto'); needs tool_call_parser."
    )
    tool_call_parser: str | None = Field(None, description="vLLM's tool-call parser for the model's format, e.g. 'hermes'.")
    reasoning_parser: str | None = Field(None, description="vLLM's reasoning parser (e.g. 'qwen3'), or None.")


class VllmModelConfig(InferenceBase):
    """vLLM engines, each a Ray actor (GPUs, or vLLM's CPU build)."""

    engine_type: Literal["vllm"] = Field("vllm", description="vLLM engines.")
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
    enforce_eager: bool = Field(False, description="Disable graph capture (faster start, needed on CPU).")
    enable_prefix_caching: bool = Field(True, description="Reuse KV cache of shared prompt prefixes.")
    enable_chunked_prefill: bool = Field(True, description="Chunk long prefills.")


class TinkerSamplerConfig(InferenceBase):
    """Tinker's sampler: the weights the Tinker trainer publishes, sampled on the service."""

    engine_type: Literal["tinker"] = Field("tinker", description="Tinker's sampling client.")


InferenceModelConfig = Annotated[Union[VllmModelConfig, TinkerSamplerConfig], Field(discriminator="engine_type")]
ENGINE_VARIANTS: dict[str, type[InferenceBase]] = {"vllm": VllmModelConfig, "tinker": TinkerSamplerConfig}



def _default_engine_type(data: object) -> object:
    if isinstance(data, dict) and "engine_type" not in data:
        return {**data, "engine_type": DEFAULT_ENGINE_TYPE}
    if isinstance(data, dict) and data["engine_type"] in ENGINE_TYPE_ALIASES:
        return {**data, "engine_type": ENGINE_TYPE_ALIASES[data["engine_type"]]}
    return data


class ExplorerConfig(Section):
    """The explorer: engines, workflow runners, evaluation cadence."""

    runner_per_model: int = Field(8, ge=1, description="Concurrent workflow runners per rollout engine.")
    max_timeout: int = Field(1800, ge=1, description="Seconds one task may run before it is failed.")
    max_retry_times: int = Field(2, ge=0, description="Retries of a failed or timed-out task.")
    eval_interval: int = Field(100, ge=1, description="Evaluate every this many explore steps.")
    eval_on_startup: bool = Field(True, description="Evaluate before the first step.")
    rollout_model: InferenceModelConfig = Field(
        default_factory=VllmModelConfig, description="Engines that serve the policy (engine_type vllm or tinker)."
    )
    auxiliary_models: list[InferenceModelConfig] = Field(
        default_factory=list, description="Extra engines workflows may call (judges, teachers); model_path required."
    )

    @model_validator(mode="before")
    @classmethod
    def _engine_type_defaults_to_vllm(cls, data: object) -> object:
        """Trinity's engine_type is optional (vllm); a tagged union needs the tag."""
        if isinstance(data, dict):
            data = dict(data)
            if "rollout_model" in data:
                data["rollout_model"] = _default_engine_type(data["rollout_model"])
            if isinstance(data.get("auxiliary_models"), list):
                data["auxiliary_models"] = [_default_engine_type(m) for m in data["auxiliary_models"]]
        return data
