"""Trinity-RFT's other spellings of our values (the only place they live); the sections normalise them. Its values
that have no counterpart here are refused by name, with why (SYNC_STYLES_NOT_BUILT)."""

from __future__ import annotations

SYNC_METHOD_ALIASES = {"online": "nccl", "offline": "checkpoint"}
SYNC_STYLE_ALIASES = {"dynamic_by_explorer": "explorer_driven", "dynamic_by_trainer": "trainer_driven"}
# Trinity's names of the vLLM engine (its sync and async wrappers): ours is one engine.
ENGINE_TYPE_ALIASES = {"vllm_async": "vllm"}
STORAGE_TYPE_ALIASES = {"sql": "sqlite"}
# Trinity named its difficulty_based task selector diff_based before (its BOTS example and selector tutorial of 0.3).
SELECTOR_TYPE_ALIASES = {"diff_based": "difficulty_based"}
# Trinity's `grpo_verl` is its `grpo` preset with the advantage computed in the trainer, on veRL's batch: the same
# estimator over the same groups (here advantages are computed where whole groups are at hand, tasks/explore.py).
ALGORITHM_TYPE_ALIASES = {"grpo_verl": "grpo"}
# Trinity's sync styles not built here: {value: why}. SynchronizerConfig refuses them by name.
SYNC_STYLES_NOT_BUILT = {
    "fully_async": "Trinity's fully_async loads the trainer's new weights into the engines as soon as they are published, "
                   "in the middle of an explore step, with up to explorer.max_inflight_batches steps in flight; here "
                   "weights change between explore steps only. The nearest is trainer_driven: the trainer publishes every "
                   "sync_interval steps and the explorer takes the newest at its next step (docs/modes.md)",
}
