"""`trainer`: one choice of training backend — torch, veRL or Tinker — its settings, and what it can run (the torch
trainer's class here; veRL's in schemas/trainer_verl.py, Tinker's in schemas/trainer_tinker.py, what they share in
schemas/trainer_base.py).

The section is a discriminated union on `trainer_type` (Trinity's name): each variant holds the
settings shared by every trainer plus its own, so a setting of another backend is an error naming
it, never silently ignored. Trinity's `model.tinker.enable` maps onto `trainer_type: tinker` (see
`schemas.trinity.aliases`).

Each variant is also the one place of its backend's facts (prime-rl's way: the rules live with the
settings they are about):
- class-level declarations: what it cannot provide of what an algorithm's pieces need (`CANNOT`, each with
  why: a piece runs on it when its declared needs, algorithms/registry.py, are a subset of the rest, and its
  refusal is generated from the need it lacks), the KL terms and entropy terms it runs, the sync methods
  its weights can travel by, where its weights live, the modules that implement it;
- `SETTINGS`: how the backend treats each of its settings, and `ALGORITHM_SETTINGS`: where it departs
  from "read in its MODULES" for the algorithm settings every trainer implements (a `SETTINGS` entry
  collects both; tests/test_settings_wired.py checks them against the code);
- `check(r)`: its own rules — refusals naming the field and why, derived values, warnings — which
  schemas/rules.py calls for the chosen trainer.
The backend's modules read these sets from here (schemas cannot import backends), so each is written once.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field

from schemas.base import Entry
from schemas.trainer_base import CRITIC_SETTINGS, DEFAULT_TRAINER_TYPE, TRAINER_TYPES, CriticConfig, TrainerBase, critic_field
from schemas.trainer_tinker import TinkerTrainerConfig
from schemas.trainer_verl import VerlTrainerConfig


class TorchTrainerConfig(TrainerBase):
    """The native torch trainer: a transformers model (optionally LoRA via peft), CPU or one GPU."""

    MODULES: ClassVar[tuple[str, ...]] = ("backends/torch_trainer.py", "backends/batch.py", "algorithms/")
    SETTINGS: ClassVar[dict[str, Entry]] = {
        **CRITIC_SETTINGS,
    }

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
        description="Give each prompt with several samples (a GRPO group) micro-batches of its own, run the prompt "
        "once in each and let every response attend to it: the same loss and gradient with fewer tokens. Rows whose "
        "prompts differ but open alike (a system prompt of 16 tokens or more, as SFT rows do) share that opening "
        "the same way. Off with "
        "gradient_checkpointing.",
    )
    seed: int = Field(
        42, description="Seed of torch's RNG before the models are built (LoRA's matrices, the critic's value head): "
        "two runs of one config start alike. A resumed run continues the checkpoint's RNG."
    )
    critic: CriticConfig = critic_field()


TrainerConfig = Annotated[
    Union[TorchTrainerConfig, VerlTrainerConfig, TinkerTrainerConfig], Field(discriminator="trainer_type")
]
__all__ = ["DEFAULT_TRAINER_TYPE", "TRAINER_TYPES", "TRAINER_VARIANTS", "TinkerTrainerConfig", "TorchTrainerConfig",
           "TrainerBase", "TrainerConfig", "VerlTrainerConfig"]
TRAINER_VARIANTS: dict[str, type[TrainerBase]] = {
    "torch": TorchTrainerConfig,
    "verl": VerlTrainerConfig,
    "tinker": TinkerTrainerConfig,
}
