"""The experiment's rules about its engines: auxiliary models (they take the rollout engines' unset settings), the
distillation teacher, and the OpenAI endpoint with what depends on it. Run by schemas/rules.py (`explorer_rules`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from algorithms.needs import needs_teacher
from schemas.explorer import NO_TINKER_ENDPOINT, VllmModelConfig
from schemas.resolver import Resolver
from schemas.secrets import is_loopback
from schemas.stage_kind import stage_kind

if TYPE_CHECKING:
    from schemas.experiment_fields import ExperimentFields


# An auxiliary model's engine settings it leaves unset are the rollout model's (on CPU, vLLM's default memory
# share would take 90 % of the machine's RAM for each engine).
ENGINE_SETTINGS_SHARED = ("gpu_memory_utilization", "kv_cache_memory_gb", "dtype", "enforce_eager",
                          "enable_prefix_caching", "enable_chunked_prefill")


def explorer_rules(r: Resolver[ExperimentFields]) -> None:
    c = r.config
    e = c.explorer
    # the chosen engine's own rules (schemas/explorer.py), first: what they derive is shared
    e.rollout_model.check(r, e.auxiliary_models, c.trainer)
    for i, aux in enumerate(e.auxiliary_models):
        if e.rollout_model.AUXILIARY:  # what it leaves unset is as the rollout engines run (memory, dtype)
            for name in ENGINE_SETTINGS_SHARED:
                if name not in aux.model_fields_set:
                    r.derive(aux, name, getattr(e.rollout_model, name), f"explorer.auxiliary_models.{i}.{name}",
                             f"explorer.rollout_model.{name}")
    if e.auxiliary_models and not e.rollout_model.AUXILIARY:
        r.error("explorer.auxiliary_models", f"auxiliary models start beside a local policy's vLLM engines; the "
                f"{e.rollout_model.engine_type!r} policy samples on its service and starts none")
    names = [aux.auxiliary_name() for aux in e.auxiliary_models]
    if len(set(names)) != len(names):
        r.error("explorer.auxiliary_models", f"two auxiliary models share a name ({', '.join(names)}): set `name` on each")
    if needs_teacher(c.algorithm) and stage_kind(c).explores and not e.auxiliary_models:
        r.error("explorer.auxiliary_models", f"algorithm.advantage_fn {c.algorithm.advantage_fn!r} learns from a "
                "teacher's log-probs: list the teacher here (its model_path; the first auxiliary model is the teacher)")
    _openai_api(r)


def _openai_api(r: Resolver[ExperimentFields]) -> None:
    """The endpoint on the rollout engines (enable_openai_api) and what depends on it."""
    c = r.config
    rollout = c.explorer.rollout_model
    path = "explorer.rollout_model"
    if not isinstance(rollout, VllmModelConfig):  # no endpoint (its settings are NOT_HERE)
        if stage_kind(c).flow == "serve":
            r.error(f"{path}.engine_type", f"mode 'serve' serves the OpenAI endpoint: {NO_TINKER_ENDPOINT}")
        return
    if stage_kind(c).flow == "serve" and not rollout.enable_openai_api:
        if rollout.is_set("enable_openai_api"):
            r.error(f"{path}.enable_openai_api", "mode 'serve' serves the endpoint: it cannot be false")
        else:
            r.derive(rollout, "enable_openai_api", True, f"{path}.enable_openai_api", "mode 'serve' serves the endpoint")
    if rollout.enable_history and not rollout.enable_openai_api:
        r.error(f"{path}.enable_history", "records the calls of the endpoint: set enable_openai_api: true too")
    if rollout.enable_openai_api and not rollout.openai_api_key_secret and not is_loopback(rollout.openai_api_host):
        r.error(f"{path}.openai_api_host",
                f"{rollout.openai_api_host!r} is reachable from other machines and the endpoint has no API key: set "
                f"{path}.openai_api_key_secret (a Prefect Secret block's name, or 'env:VAR'), or bind 127.0.0.1")
    if rollout.enable_auto_tool_choice and not rollout.tool_call_parser:
        r.error(f"{path}.tool_call_parser", "required by enable_auto_tool_choice (the model's format, e.g. 'hermes')")
    if not rollout.enable_openai_api:
        unused = [f for f in ("enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "openai_api_port")
                  if rollout.is_set(f) and getattr(rollout, f)]
        if unused:
            r.warn(f"{', '.join(f'{path}.{f}' for f in unused)} take effect only with {path}.enable_openai_api: true")


