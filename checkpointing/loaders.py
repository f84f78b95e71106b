"""Build the *unmerged* model of a checkpoint in memory (float32): the thing a conversion must reproduce.

- Ours (`rft-torch-v1`): `trainable.safetensors` holds every weight (HF names), or with LoRA only the
  peft adapter on top of the base model in `base_model_dir`.
- veRL FSDP (`model_world_size_W_rank_R.pt`): veRL's own merger (`verl.model_merger`) reads the mesh and
  merges, with the shards gathered in the dtype they were saved in (veRL's merger would cast them to
  bfloat16, fsdp_model_merger.py:187,199); with LoRA its `save_lora_adapter` writes the adapter as a peft
  folder, which peft loads back. The model is saved in the dtype its config declares (the base model's
  when given): a float32 model stays float32, a bfloat16 one is bfloat16 as veRL's merger writes it.
A LoRA checkpoint comes back as a `PeftModel` (adapters not merged), so its logits are the reference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from checkpointing.safe_load import load_tensors

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
        from transformers import AutoConfig, AutoModelForCausalLM  # lazily: see load_base_model

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
    """veRL's FSDPModelMerger reads the shards' mesh (world size from fsdp_config.json, DTensor placements,
    replicated entries); `gather_verl_shards` merges them without its bfloat16 cast."""
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    class CollectingMerger(FSDPModelMerger):
        """Stops where veRL would save: we save ourselves (shard size, LoRA merge, verification)."""

        merged: dict[str, torch.Tensor]

        def _load_and_merge_state_dicts(self, world_size, total_shards, mesh_shape, mesh_dim_names):  # noqa: ANN001, ANN202
            return gather_verl_shards(Path(self.config.local_dir), world_size, total_shards, mesh_dim_names)

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
        save_dtype = declared_dtype(base_model_dir, config_dir) or next(iter(state.values())).dtype
        from transformers import AutoModelForCausalLM  # lazily: see load_base_model

        model = AutoModelForCausalLM.from_config(merger.model_config, dtype=torch.float32)
        load_complete(model, {k: v.float() for k, v in state.items()}, where)
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

    from checkpointing import tinker_state
    from checkpointing.models import resolve_model_path

    state = tinker_state.read(actor)
    assert state is not None
    adapter = actor / tinker_state.ADAPTER_DIR
    if not (adapter / "adapter_config.json").is_file():
        tinker_state.download_adapter(state, adapter)
    base = load_base_model(base_model_dir or resolve_model_path(state["base_model"]), where)
    save_dtype = base.dtype
    return Unmerged(PeftModel.from_pretrained(base.float(), str(adapter)), save_dtype, is_lora=True)


def gather_verl_shards(
    actor: Path, world_size: int, total_shards: int, mesh_dim_names: tuple[str, ...]
) -> dict[str, torch.Tensor]:
    """The full state dict of veRL's FSDP shards, each tensor in the dtype it was saved in.

    A DTensor's local shards are concatenated along its shard dimension (a replicated one taken once;
    the replica dimension of an HSDP ("ddp", "fsdp") mesh dropped); plain tensors are replicated
    buffers, kept once (veRL's merge_non_dtensor_shards checks they agree)."""
    from torch.distributed.tensor import DTensor
    from verl.model_merger.fsdp_model_merger import merge_non_dtensor_shards

    shards = [
        load_tensors(actor / f"model_world_size_{world_size}_rank_{rank}.pt")
        for rank in range(total_shards)
    ]
    merged: dict[str, torch.Tensor] = {}
    for key in sorted(shards[0]):
        parts = [shard.pop(key) for shard in shards]
        if not isinstance(parts[0], DTensor):
            merged[key] = merge_non_dtensor_shards(key, parts)
            continue
        placements = tuple(parts[0].placements)
        if mesh_dim_names[0] in ("dp", "ddp"):
            placements = placements[1:]
        if len(placements) != 1 or placements[0].is_partial():
            raise NotImplementedError(f"{actor}: {key}: placements {placements} (only FSDP sharding is supported)")
        local = [part._local_tensor for part in parts]
        merged[key] = local[0] if placements[0].is_replicate() else torch.cat(local, dim=placements[0].dim).contiguous()
    return merged


def declared_dtype(*config_dirs: Path | None) -> torch.dtype | None:
    """The dtype the first of `config_dirs` with a config.json declares (`dtype`, or the older `torch_dtype`)."""
    for folder in config_dirs:
        if folder is None or not (Path(folder) / "config.json").is_file():
            continue
        config = json.loads((Path(folder) / "config.json").read_text())
        name = config.get("dtype") or config.get("torch_dtype")
        dtype = getattr(torch, name, None) if isinstance(name, str) else None
        return dtype if isinstance(dtype, torch.dtype) else None
    return None


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
    # transformers' model classes are imported where a model is built, never at import: they pull in
    # torch._dynamo and sklearn (~7 s), and every `rft run` process imports this module through the flows.
    from transformers import AutoModelForCausalLM

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
