"""`explorer`: rollout engines and the runners that execute workflows.

`rollout_model` (and each auxiliary model) is a discriminated union on `engine_type` (Trinity's
name): vLLM engines with their settings, or Tinker's sampler, which has none of vLLM's. Each variant
is the one place of its engine's facts, as the trainer variants are (schemas/trainer.py): which
weights it samples (`WEIGHTS`), how it treats each of its settings (`SETTINGS`) and its own rules
(`check`, run by schemas/rules.py for the rollout model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, Union

from pydantic import Field, field_validator, model_validator

from schemas.base import Entry, Section, Variant, honoured, warned
from schemas.resolver import Resolver
from schemas.stage_kind import stage_kind
from schemas.trinity.names import ENGINE_TYPE_ALIASES

if TYPE_CHECKING:
    from schemas.sections import Sections, TrainedWeights

ENGINE_TYPES = ("vllm", "tinker")
DEFAULT_ENGINE_TYPE = "vllm"


NO_TINKER_ENDPOINT = ("the OpenAI endpoint (and its call history) is built on the vLLM engines only; the Tinker "
                      "sampler's is not built yet")


class InferenceBase(Variant):
    """Settings every rollout engine honours, and the facts every engine declares."""

    TAG: ClassVar[str] = "engine_type"
    # Which trained weights it samples: "local" (folders and tensors) or "tinker" (tinker:// paths); see
    # TrainerBase.WEIGHTS.
    WEIGHTS: ClassVar[str] = "local"
    # Whether the run's engines and trainer hold GPUs of its own cluster (where there are any): what its GPU
    # seconds count (tracking/usage.py); a service's GPUs are not counted.
    HOLDS_GPUS: ClassVar[bool] = True
    # Whether a rollout model of this type has auxiliary models started beside it (explorer.auxiliary_models: vLLM
    # engines the local policy starts).
    AUXILIARY: ClassVar[bool] = False
    SETTINGS: ClassVar[dict[str, Entry]] = {}
    NOT_HERE: ClassVar[dict[str, str]] = {
        "model_path": "the rollout model always serves model.model_path (model_path is an auxiliary model's)",
        "name": "the rollout model is served as model.model_path and 'policy'; name is for auxiliary models"}

    def check(self, r: Resolver[Sections], auxiliary: Sequence[InferenceBase], trainer: TrainedWeights) -> None:
        """This engine's own rules (for the rollout model), run by schemas/rules.py; `auxiliary`: the explorer's
        auxiliary models, `trainer`: the trainer's settings (what weights it trains)."""

    def gpus(self) -> int:
        """GPUs its engines take."""
        return 0

    engine_num: int = Field(1, ge=1, description="Number of engines.")
    seed: int = Field(42, description="Sampling seed.")
    enable_thinking: bool = Field(False, description="Chat-template thinking mode (Qwen3).")


class OpenAIEndpoint(Section):
    """vLLM's OpenAI-compatible server on each engine (backends/local/openai_server.py): the vLLM engines' settings of
    it, which a rollout model without one does not have (its NOT_HERE names them)."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "enable_history": honoured(note="calls recorded per rollout id for agent workflows"),
        "openai_api_key_secret": honoured(note="schemas/secrets.py reads the key"),
        "tool_call_parser": honoured(passthrough=True),
        "reasoning_parser": honoured(passthrough=True),
    }

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
    openai_api_key_secret: str | None = Field(
        None,
        description="Where the endpoint's API key is kept, never the key itself: the name of a Prefect Secret block, "
        "or 'env:VAR' (an environment variable of the worker). Clients send it as the openai client's api_key. "
        "None: no key, allowed only on a loopback openai_api_host.",
    )
    openai_max_concurrent_requests: int = Field(
        256, ge=1, description="Endpoint requests in flight at once per engine; more are answered 429 (retry later). "
        "Agent workflows keep up to runner_per_model × repeat_times in flight.",
    )
    openai_max_request_bytes: int = Field(4 * 2**20, ge=1024, description="Largest request body (413 above it).")
    openai_max_tokens: int | None = Field(
        None, ge=1, description="Most tokens one endpoint request may ask for, and the default when it asks for "
        "none; None: model.max_response_tokens.",
    )
    enable_auto_tool_choice: bool = Field(
        False, description="Let the model decide to call tools (tool_choice 'auto'); needs tool_call_parser."
    )
    tool_call_parser: str | None = Field(None, description="vLLM's tool-call parser for the model's format, e.g. 'hermes'.")
    reasoning_parser: str | None = Field(None, description="vLLM's reasoning parser (e.g. 'qwen3'), or None.")


# On CPU: ~46k tokens of SmolLM2-135M's float32 KV, a whole evaluation batch of the embedded recipes.
CPU_KV_CACHE_GB = 2.0


class _VllmEngines(InferenceBase):
    """The engines' own settings (a class of their own so that they come before the endpoint's, as the pages list them)."""

    engine_type: Literal["vllm"] = Field("vllm", description="vLLM engines.")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per engine.")
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="Fraction of GPU memory (on CPU: of host RAM) the engine reserves."
    )
    kv_cache_memory_gb: float | None = Field(
        None,
        gt=0,
        description="KV cache size in GiB, instead of sizing it from gpu_memory_utilization. None on CPU "
        f"(cluster.gpu_per_node 0) with gpu_memory_utilization unset: {CPU_KV_CACHE_GB} (derived), because there "
        "vLLM would reserve the fraction of the NUMA node's RAM and refuses to start when less is free.",
    )
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = Field("bfloat16", description="Weights dtype.")
    enforce_eager: bool = Field(False, description="Disable graph capture (faster start, needed on CPU).")
    enable_prefix_caching: bool = Field(True, description="Reuse KV cache of shared prompt prefixes.")
    enable_chunked_prefill: bool = Field(True, description="Chunk long prefills.")


class VllmModelConfig(OpenAIEndpoint, _VllmEngines):
    """vLLM engines, each a Ray actor (GPUs, or vLLM's CPU build)."""

    AUXILIARY: ClassVar[bool] = True
    SETTINGS: ClassVar[dict[str, Entry]] = {
        **OpenAIEndpoint.SETTINGS,
        "enable_thinking": honoured(note="passed to the chat template"),
        "dtype": honoured(passthrough=True),
    }

    def gpus(self) -> int:
        return self.engine_num * self.tensor_parallel_size

    def check(self, r: Resolver[Sections], auxiliary: Sequence[InferenceBase], trainer: TrainedWeights) -> None:
        """On CPU, a fixed KV cache unless a memory share is asked for; the engines' GPUs fit the cluster (and leave
        the trainer some in mode both)."""
        c = r.config
        if c.cluster.gpu_per_node == 0 and self.kv_cache_memory_gb is None and not self.is_set("gpu_memory_utilization"):
            # vLLM's CPU worker refuses to start when less than gpu_memory_utilization × RAM is free (0.9 by default:
            # so beside any other process); auxiliary models take this value too (schemas/rules.py)
            r.derive(self, "kv_cache_memory_gb", CPU_KV_CACHE_GB, "explorer.rollout_model.kv_cache_memory_gb",
                     "cluster.gpu_per_node is 0: vLLM's CPU build would reserve gpu_memory_utilization of the RAM")
        gpus, nodes = c.cluster.gpu_per_node, c.cluster.node_num
        kind = stage_kind(c)
        if gpus and nodes and kind.explores:
            rollout = sum(m.gpus() for m in (self, *auxiliary))
            total = gpus * nodes
            if kind.trains and not kind.shares_devices and rollout >= total:  # both: the trainer needs GPUs of its own
                r.error("explorer.rollout_model.engine_num",
                        f"engines need {rollout} GPUs (engine_num × tensor_parallel_size, plus auxiliary models) but "
                        f"cluster.node_num × cluster.gpu_per_node = {total} leaves none for the trainer in mode 'both'"
                        + ("; on one GPU use mode 'colocate' (engine and trainer share it, taking turns)" if total == 1 else ""))
            elif rollout > total:
                r.error("explorer.rollout_model.engine_num", f"engines need {rollout} GPUs but the cluster has {total}")


class TinkerSamplerConfig(InferenceBase):
    """Tinker's sampler: the weights the Tinker trainer publishes, sampled on the service."""

    WEIGHTS: ClassVar[str] = "tinker"
    HOLDS_GPUS: ClassVar[bool] = False  # the service samples and trains
    SETTINGS: ClassVar[dict[str, Entry]] = {
        "engine_num": warned("Tinker's sampler is one service (no engines to count)"),
        "seed": honoured(note="seeds each request's sampling seed"),
        "enable_thinking": honoured(note="passed to the chat template"),
    }
    NOT_HERE: ClassVar[dict[str, str]] = {
        **InferenceBase.NOT_HERE, **dict.fromkeys(OpenAIEndpoint.model_fields, NO_TINKER_ENDPOINT)}

    engine_type: Literal["tinker"] = Field("tinker", description="Tinker's sampling client.")

    def check(self, r: Resolver[Sections], auxiliary: Sequence[InferenceBase], trainer: TrainedWeights) -> None:
        """It samples only what the Tinker trainer trains."""
        if trainer.WEIGHTS != self.WEIGHTS and stage_kind(r.config).trains:
            r.error("explorer.rollout_model.engine_type",
                    f"'tinker' samples only weights trained by trainer_type 'tinker' (got {trainer.trainer_type!r})")


class AuxiliaryModelConfig(VllmModelConfig):
    """An auxiliary model (explorer.auxiliary_models): vLLM engines of another model that workflows call (a judge, an
    answerer) or that scores the samples (the distillation teacher, the first one), started beside the policy's."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        **VllmModelConfig.SETTINGS,
        "name": honoured(note="served model name; auxiliary_name() here"),
        "enable_thinking": warned("no workflow renders a chat for an auxiliary model: the teacher scores the "
                                  "student's own tokens"),
    }
    NOT_HERE: ClassVar[dict[str, str]] = {}

    model_path: str = Field(..., min_length=1, description="The model its engines serve (a folder or hub id).")
    name: str | None = Field(
        None, description="The name workflows and the endpoint know it by; None: the last part of its model_path."
    )

    @field_validator("engine_type", mode="before")
    @classmethod
    def _vllm_only(cls, value: object) -> object:
        if value != "vllm":
            raise ValueError(f"an auxiliary model runs on vLLM engines; {value!r} engines are not started as one")
        return value

    def auxiliary_name(self) -> str:
        """The name it is known by: its `name`, else the last part of its model_path."""
        return self.name or self.model_path.rstrip("/").rsplit("/", 1)[-1]


InferenceModelConfig = Annotated[Union[VllmModelConfig, TinkerSamplerConfig], Field(discriminator="engine_type")]
ENGINE_VARIANTS: dict[str, type[InferenceBase]] = {"vllm": VllmModelConfig, "tinker": TinkerSamplerConfig}



def _default_engine_type(data: object) -> object:
    if isinstance(data, dict) and "engine_type" not in data:
        return {**data, "engine_type": DEFAULT_ENGINE_TYPE}
    if isinstance(data, dict) and isinstance(data["engine_type"], str) and data["engine_type"] in ENGINE_TYPE_ALIASES:
        return {**data, "engine_type": ENGINE_TYPE_ALIASES[data["engine_type"]]}
    return data


class ExplorerConfig(Section):
    """The explorer: engines, workflow runners, evaluation cadence."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "max_timeout": honoured(note="per workflow task, inside the runner"),
        "max_retry_times": honoured(note="retries of a workflow task, and of the explore/evaluate Prefect tasks"),
        "auxiliary_models": honoured(note="vLLM engines of other models; the first is the distillation teacher"),
    }

    runner_per_model: int = Field(8, ge=1, description="Concurrent workflow runners per rollout engine.")
    max_timeout: int = Field(1800, ge=1, description="Seconds one task may run before it is failed.")
    max_retry_times: int = Field(2, ge=0, description="Retries of a failed or timed-out task.")
    max_failed_task_ratio: float = Field(
        0.5, ge=0, le=1,
        description="The largest share of an explore step's tasks that may fail (or time out) after their retries: "
        "above it the step fails, naming the first error; at or below it the step trains on the rest and reports "
        "the share (explore/tasks_failed_share, the progress bar, rft watch).",
    )
    eval_interval: int = Field(100, ge=1, description="Evaluate every this many explore steps.")
    eval_on_startup: bool = Field(True, description="Evaluate before the first step.")
    rollout_model: InferenceModelConfig = Field(
        default_factory=VllmModelConfig, description="Engines that serve the policy (engine_type vllm or tinker)."
    )
    auxiliary_models: list[AuxiliaryModelConfig] = Field(
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
