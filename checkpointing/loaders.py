"""Build the *unmerged* model of a checkpoint in memory (float32): the thing a conversion must reproduce.

- Ours (`rft-torch-v1`): `trainable.safetensors` holds every weight (HF names), or with LoRA only the
  peft adapter on top of the base model in `base_model_dir`.
- veRL FSDP (`model_world_size_W_rank_R.pt`): veRL's own merger (`verl.model_merger`) gathers the DTensor
  shards; with LoRA its `save_lora_adapter` writes the adapter as a peft folder, which peft loads back.
A LoRA checkpoint comes back as a `PeftModel` (adapters not merged), so its logits are the reference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

TORCH_FORMAT = "rft-torch-v1"  # backends/torch_trainer.py CHECKPOINT_FORMAT
VERL_LORA_META = "lora_train_meta.json"


@dataclass
class Unmerged:
    model: torch.nn.Module  # float32; a peft.PeftModel when the checkpoint is a LoRA adapter
    save_dtype: torch.dtype  # the dtype the checkpoint's weights are stored in
    is_lora: bool


def load_torch_checkpoint(actor: Path, config_dir: Path, base_model_dir: Path | None, where: str) -> Unmerged:
    state = json.loads((actor / "trainer_state.json").read_text())
    weights = load_file(str(actor / "trainable.safetensors"))
    if not weights:
        raise ValueError(f"{where}: {actor / 'trainable.safetensors'} holds no tensors")
    if state.get("lora") is None:
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_dir), dtype=torch.float32)
        load_complete(model, weights, where)
        return Unmerged(model, next(iter(weights.values())).dtype, is_lora=False)

    from peft import get_peft_model

    base = load_base_model(base_model_dir or Path(state["base_model_dir"]), where)
    save_dtype = base.dtype
    peft_model = get_peft_model(base.float(), peft_lora_config(state["lora"]))
    result = peft_model.load_state_dict(weights, strict=False)
    not_loaded = [k for k in result.missing_keys if "lora_" in k]
    if result.unexpected_keys or not_loaded:
        raise ValueError(
            f"{where}: the LoRA adapter in trainable.safetensors does not fit the base model and lora settings "
            f"in trainer_state.json (unknown: {result.unexpected_keys[:3]}, not in file: {not_loaded[:3]})"
        )
    return Unmerged(peft_model, save_dtype, is_lora=True)


def load_verl_fsdp(actor: Path, config_dir: Path, base_model_dir: Path | None, workdir: Path, where: str) -> Unmerged:
    """veRL's FSDPModelMerger gathers the shards (world size from fsdp_config.json, DTensor placements,
    replicated entries) and casts them to bfloat16, as `python -m verl.model_merger merge` does."""
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    class CollectingMerger(FSDPModelMerger):
        """Stops where veRL would save: we save ourselves (shard size, LoRA merge, verification)."""

        merged: dict[str, torch.Tensor]

        def save_hf_model_and_tokenizer(self, state_dict: dict[str, torch.Tensor]) -> None:
            self.merged = state_dict

    check_verl_shards(actor, where)
    merger = CollectingMerger(
        ModelMergerConfig(
            operation="merge",
            backend="fsdp",
            local_dir=str(actor),
            target_dir=str(workdir),
            hf_model_config_path=str(config_dir),
        )
    )
    merger.merge_and_save()
    state = merger.merged
    has_lora = any("lora_" in k for k in state)
    if has_lora and not (actor / VERL_LORA_META).is_file():
        raise FileNotFoundError(f"{where}: LoRA weights but no {VERL_LORA_META} (rank and alpha) in {actor}")
    lora_dir = merger.save_lora_adapter(state)  # writes workdir/lora_adapter, strips peft prefixes in place

    if state:
        save_dtype = next(iter(state.values())).dtype
        model = AutoModelForCausalLM.from_config(merger.model_config, dtype=torch.float32)
        load_complete(model, state, where)
    else:  # veRL's save_lora_only: the shards hold the adapter alone
        if base_model_dir is None:
            raise ValueError(f"{where}: the checkpoint holds only a LoRA adapter; pass --base-model-dir")
        model = load_base_model(base_model_dir, where)
        save_dtype = model.dtype
        model = model.float()
    if lora_dir is None:
        return Unmerged(model, save_dtype, is_lora=False)

    from peft import PeftModel

    return Unmerged(PeftModel.from_pretrained(model, lora_dir), save_dtype, is_lora=True)


def load_tinker_checkpoint(actor: Path, base_model_dir: Path | None, where: str) -> Unmerged:
    """A Tinker checkpoint: its sampler weights downloaded once as a PEFT adapter (actor/tinker_adapter/)
    on the base model it was trained from (`base_model_dir`, else the recorded base model, resolved
    as model.model_path is)."""
    from peft import PeftModel

    from backends.models import resolve_model_path
    from checkpointing import tinker_state

    state = tinker_state.read(actor)
    assert state is not None
    adapter = actor / tinker_state.ADAPTER_DIR
    if not (adapter / "adapter_config.json").is_file():
        tinker_state.download_adapter(state, adapter)
    base = load_base_model(base_model_dir or resolve_model_path(state["base_model"]), where)
    save_dtype = base.dtype
    return Unmerged(PeftModel.from_pretrained(base.float(), str(adapter)), save_dtype, is_lora=True)


def check_verl_shards(actor: Path, where: str) -> None:
    config = actor / "fsdp_config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{where}: {config} is missing (veRL writes it with the shards)")
    world_size = json.loads(config.read_text()).get("world_size")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"{where}: {config}: world_size must be a positive integer, got {world_size!r}")
    missing = [r for r in range(world_size) if not (actor / f"model_world_size_{world_size}_rank_{r}.pt").is_file()]
    if missing:
        raise FileNotFoundError(f"{where}: model shards of ranks {missing} (of {world_size}) are missing in {actor}")


def peft_lora_config(lora: dict):
    """Our LoRAConfig settings (schemas/model.py), as the torch trainer gave them to peft."""
    from peft import LoraConfig

    return LoraConfig(
        r=lora["lora_rank"],
        lora_alpha=lora["lora_alpha"],
        target_modules=lora["target_modules"],
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )


def load_base_model(base_model_dir: Path, where: str) -> torch.nn.Module:
    if not (base_model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{where}: base model folder {base_model_dir} has no config.json (--base-model-dir)")
    return AutoModelForCausalLM.from_pretrained(base_model_dir, dtype="auto")


def load_complete(model: torch.nn.Module, weights: dict[str, torch.Tensor], where: str) -> None:
    """Load every weight of `model` from `weights`; a tied weight may come under either of its names."""
    result = model.load_state_dict(weights, strict=False)
    names_of: dict[int, set[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(param), set()).add(name)
    loaded = set(weights)
    missing = [
        k
        for k in result.missing_keys
        if not any(names & loaded for names in names_of.values() if k in names)
    ]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"{where}: checkpoint weights do not match the model config "
            f"(missing: {missing[:5]}, unexpected: {result.unexpected_keys[:5]})"
        )
