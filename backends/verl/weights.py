"""The trained model's weights as Hugging Face-named full tensors, inside a veRL worker process.

One stream serves both ways weights leave the trainer: a safetensors folder (checkpoint / memory
sync, every device) and the GPU push into running vLLM workers (`WeightTransport.push_weights`).
Every rank must iterate it: gathering a sharded (DTensor) parameter is a collective.

veRL's own stream (`engine.get_per_tensor_param`) casts merged LoRA weights to bfloat16
(verl/workers/engine/fsdp/transformer_impl.py:1082); this one yields them in `dtype`, the dtype the
model's config declares, so a float32 model is exported in float32.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import torch


class EngineWeights:
    """Re-iterable (name, full tensor) pairs of a veRL FSDP engine's model, LoRA merged in."""

    def __init__(self, engine: Any, dtype: torch.dtype) -> None:
        self.engine = engine
        self.dtype = dtype
        module = engine.module
        self.model = getattr(module, "_fsdp_wrapped_module", module)
        self.is_lora = hasattr(self.model, "peft_config")
        # tied embeddings: transformers and vLLM take lm_head from embed_tokens (safetensors refuses the alias)
        self.tied = bool(getattr(engine.model_config.hf_config, "tie_word_embeddings", False))

    def _named(self) -> dict[str, torch.Tensor]:
        from verl.utils.fsdp_utils import normalize_peft_param_name
        from verl.utils.model import convert_weight_keys

        state = self.engine.module.state_dict()
        if self.is_lora:
            state = normalize_peft_param_name(state)
        state = convert_weight_keys(state, self.model)
        if self.tied:
            state.pop("lm_head.weight", None)
        return state

    def metadata(self) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
        """(name, dtype, full shape) of every tensor iteration yields, in order, without gathering."""
        return [(file_name, self.dtype, tuple(part.shape))
                for name, t in self._named().items()
                for file_name, part in self._file_names(name, torch.empty(t.shape, device="meta")).items()]

    def _file_names(self, name: str, full: torch.Tensor) -> dict[str, torch.Tensor]:
        """One full tensor under the names of a Hugging Face folder: transformers 5 keeps a mixture of experts'
        experts fused in one tensor per layer where its files, and vLLM, have one per expert."""
        from transformers.core_model_loading import revert_weight_conversion

        return revert_weight_conversion(self.model, {name: full})

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        from torch.distributed.tensor import DTensor
        from verl.utils.fsdp_utils import merged_lora_context

        # LoRA: merged into the base weights while iterating, the unmerged weights restored after
        # (the state dict aliases the live parameters, so it is read inside the context).
        with merged_lora_context(self.engine.module, backup_adapters=True) if self.is_lora else nullcontext():
            for name, tensor in self._named().items():
                full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor.detach().clone()
                for file_name, part in self._file_names(name, full).items():
                    yield file_name, part.to(self.dtype)


def config_dtype(hf_config: Any) -> torch.dtype:
    """The dtype a model's config declares (float32 when it declares none)."""
    declared = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
    if isinstance(declared, str):
        declared = getattr(torch, declared, None)
    return declared if isinstance(declared, torch.dtype) else torch.float32
