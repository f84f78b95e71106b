"""The runtime side of each backend kind: the class that implements it and the secrets it needs.

A backend's settings, what it can run and its rules are its settings class (schemas/trainer.py,
schemas/explorer.py); what runs it is one line here. A new backend adds its folder, its settings
variant and a line here (docs/adding-a-backend.md).

Classes are named as "module:Class" and imported on first use, so choosing a backend never imports
the others' heavy dependencies (vLLM, Ray, the Tinker SDK).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schemas.secrets import openai_api_key

if TYPE_CHECKING:
    from schemas import ExperimentConfig


@dataclass(frozen=True)
class Backend:
    implementation: str  # "module:Class"
    secrets: tuple[str, ...] = ()  # names in SECRETS: what the backend needs before it starts


# trainer.trainer_type -> TrainerBackend
TRAINERS: dict[str, Backend] = {
    "torch": Backend("backends.torch_trainer:TorchTrainer"),
    "verl": Backend("backends.verl.trainer:VerlTrainer"),
    # lives in the run's process (backends.tinker.policy)
    "tinker": Backend("backends.tinker.trainer:TinkerTrainer", secrets=("Tinker API key",)),
}
# explorer.rollout_model.engine_type -> Policy (the rollout side decides where the policy lives)
POLICIES: dict[str, Backend] = {
    "vllm": Backend("backends.local.policy:LocalPolicy"),
    "tinker": Backend("backends.tinker.policy:TinkerPolicy", secrets=("Tinker API key",)),
}
# A secret's name -> "module:function" returning (the secret, where it came from in words that can be
# logged). Secrets come from Prefect Secret blocks or the environment, never from the config.
SECRETS: dict[str, str] = {
    "Tinker API key": "schemas.secrets:tinker_api_key_with_source",
}


def load(spec: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def trainer_class(trainer_type: str) -> Any:
    if trainer_type not in TRAINERS:
        raise NotImplementedError(
            f"trainer.trainer_type={trainer_type!r}: this adapter is not built yet; built: {', '.join(TRAINERS)}"
        )
    return load(TRAINERS[trainer_type].implementation)


def policy_class(engine_type: str) -> Any:
    if engine_type not in POLICIES:
        raise NotImplementedError(
            f"explorer.rollout_model.engine_type={engine_type!r}: this backend is not built yet; built: {', '.join(POLICIES)}"
        )
    return load(POLICIES[engine_type].implementation)


def secret_sources(config: ExperimentConfig) -> list[str]:
    """Where each secret the config's trainer and engine need comes from (raises naming where a missing
    one is looked for; never returns a secret)."""
    needed = [*TRAINERS[config.trainer.trainer_type].secrets, *POLICIES[config.explorer.rollout_model.engine_type].secrets]
    lines = []
    for name in dict.fromkeys(needed):
        _, source = load(SECRETS[name])()
        lines.append(f"{name}: from {source}")
    rollout = config.explorer.rollout_model
    where = getattr(rollout, "openai_api_key_secret", None)
    if getattr(rollout, "enable_openai_api", False) and where:
        openai_api_key(where)  # raises naming the setting when the key is not there
        lines.append(f"the OpenAI endpoint's API key: from {where} (explorer.rollout_model.openai_api_key_secret)")
    return lines
