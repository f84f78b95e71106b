"""Which class implements each backend kind. A new backend adds its files and one line here.

Classes are named as "module:Class" and imported on first use, so choosing a backend never imports
the others' heavy dependencies (vLLM, Ray, the Tinker SDK).
"""

from __future__ import annotations

import importlib
from typing import Any

# trainer.trainer_type -> TrainerBackend
TRAINERS: dict[str, str] = {
    "torch": "backends.torch_trainer:TorchTrainer",
    "verl": "backends.verl.trainer:VerlTrainer",
    "tinker": "backends.tinker.trainer:TinkerTrainer",  # lives in the run's process (backends.tinker.policy)
}
# explorer.rollout_model.engine_type -> Policy (the rollout side decides where the policy lives)
POLICIES: dict[str, str] = {
    "vllm": "backends.local.policy:LocalPolicy",
    "tinker": "backends.tinker.policy:TinkerPolicy",
}


def load(spec: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def trainer_class(trainer_type: str) -> Any:
    if trainer_type not in TRAINERS:
        raise NotImplementedError(
            f"trainer.trainer_type={trainer_type!r}: this adapter is not built yet; built: {', '.join(TRAINERS)}"
        )
    return load(TRAINERS[trainer_type])


def policy_class(engine_type: str) -> Any:
    if engine_type not in POLICIES:
        raise NotImplementedError(
            f"explorer.rollout_model.engine_type={engine_type!r}: this backend is not built yet; built: {', '.join(POLICIES)}"
        )
    return load(POLICIES[engine_type])
