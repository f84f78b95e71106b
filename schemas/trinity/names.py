"""Trinity-RFT's other spellings of our values (the only place they live); the sections normalise them."""

from __future__ import annotations

SYNC_METHOD_ALIASES = {"online": "nccl", "offline": "checkpoint"}
SYNC_STYLE_ALIASES = {"dynamic_by_explorer": "explorer_driven", "dynamic_by_trainer": "trainer_driven"}
# Trinity's names of the vLLM engine (its sync and async wrappers): ours is one engine.
ENGINE_TYPE_ALIASES = {"vllm_async": "vllm"}
STORAGE_TYPE_ALIASES = {"sql": "sqlite"}
