"""Convert one trainer checkpoint (`global_step_N/actor/`) into a Hugging Face model in `actor/huggingface/`.

Formats: ours (torch trainer), veRL's FSDP shards, and Tinker's (the adapter is downloaded from the
Tinker server into actor/tinker_adapter/ first, see checkpointing/tinker_state.py).

    detect_format -> load the unmerged model (checkpointing/loaders.py) -> its logits -> export the LoRA
    adapter (optional) -> merge LoRA with peft -> save_pretrained, sharded above `max_shard_size`, into a
    temporary folder -> verify (checkpointing/verify.py) -> move the files into `huggingface/`.

Weights are moved in last (shards first, the index or the single model.safetensors at the very end), so
`is_converted` is true only for a whole, verified model: a second run skips the step and changes nothing.
Only the actor is converted.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import torch

from checkpointing import layout, tinker_state
from checkpointing.layout import DEFAULT_MAX_SHARD_SIZE
from checkpointing.loaders import (
    TORCH_FORMAT,
    VERL_LORA_META,
    Unmerged,
    load_tinker_checkpoint,
    load_torch_checkpoint,
    load_verl_fsdp,
)
from checkpointing.safe_load import check_folder
from checkpointing.verify import logits, sample_input, tolerance, verify

logger = logging.getLogger(__name__)

WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
ADAPTER_DIR = "lora_adapter"  # inside huggingface/, where veRL's merger puts it too
WORK_DIR = ".huggingface.converting"  # inside actor/; removed on the way out and before a new attempt
# Everything of a model folder but its weights: config, tokenizer, chat and generation settings.
SIDE_FILES = ("*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken")


def convert_step(
    step_dir: Path,
    base_model_dir: Path | None = None,
    export_adapter: bool = False,
    max_shard_size: str | int = DEFAULT_MAX_SHARD_SIZE,
) -> dict:
    """Convert `step_dir` (a `global_step_N` folder or a path inside one); returns a small summary."""
    step = layout.enclosing_step_dir(Path(step_dir))
    if step is None:
        raise ValueError(f"{step_dir} is not a global_step_N folder nor inside one")
    where = str(step)
    actor = step / "actor"
    if not actor.is_dir():
        raise FileNotFoundError(f"{where}: no actor/ folder (only the actor is converted)")
    hf = actor / "huggingface"
    fmt = detect_format(actor, where)
    lora = is_lora(actor, fmt)
    if export_adapter and not lora:
        raise ValueError(f"{where}: --export-adapter needs a LoRA checkpoint; this one is full fine-tuning")
    need_model = not is_converted(hf)
    need_adapter = export_adapter and not (hf / ADAPTER_DIR / "adapter_config.json").is_file()
    result = {
        "step": step.name,
        "step_dir": str(step),
        "format": fmt,
        "model_dir": str(hf),
        "adapter_dir": str(hf / ADAPTER_DIR) if export_adapter else None,
        "skipped": True,
        "dtype": None,
        "max_logit_diff": None,
        "tolerance": None,
    }
    if not need_model and not need_adapter:
        logger.info("%s: already converted, skipped", where)
        return result

    config_dir = config_source(hf, base_model_dir, where)
    check_folder(actor)  # every pickle-format file loads weights-only, or the step is refused naming it
    work = actor / WORK_DIR
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        unmerged = load_unmerged(fmt, actor, config_dir, base_model_dir, work, where)
        input_ids = sample_input(unmerged.model.config.vocab_size)
        reference = logits(unmerged.model, input_ids)
        if need_adapter:  # before merging: merge_and_unload takes the adapter out of the model
            save_adapter(unmerged.model, work / "adapter")
        if need_model:
            model = unmerged.model.merge_and_unload() if unmerged.is_lora else unmerged.model
            model.to(unmerged.save_dtype).save_pretrained(work / "model", max_shard_size=max_shard_size)
            diff = verify(work / "model", reference, input_ids, unmerged.save_dtype, where)
            if config_dir != hf:
                copy_side_files(config_dir, hf)
            publish_model(work / "model", hf)
            result.update(max_logit_diff=diff, tolerance=tolerance(unmerged.save_dtype))
        if need_adapter:
            shutil.rmtree(hf / ADAPTER_DIR, ignore_errors=True)
            os.replace(work / "adapter", hf / ADAPTER_DIR)
        result.update(skipped=False, dtype=str(unmerged.save_dtype).removeprefix("torch."))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    logger.info("%s: converted (%s, max logit diff %s)", where, fmt, result["max_logit_diff"])
    return result


def detect_format(actor: Path, where: str) -> str:
    if (actor / tinker_state.FILE).is_file():
        return "tinker"
    state = actor / "trainer_state.json"
    if state.is_file():
        found = json.loads(state.read_text()).get("format")
        if found != TORCH_FORMAT:
            raise ValueError(f"{where}: {state}: unknown checkpoint format {found!r} (expected {TORCH_FORMAT!r})")
        return "rft-torch"
    if (actor / "fsdp_config.json").is_file() or any(actor.glob("model_world_size_*_rank_*.pt")):
        return "verl-fsdp"
    if (actor / "dist_ckpt").is_dir() or (actor / "model" / "dist_ckpt").is_dir():
        raise ValueError(
            f"{where}: a veRL Megatron checkpoint; convert it with `python -m verl.model_merger merge "
            "--backend megatron` (needs megatron-core)"
        )
    raise FileNotFoundError(
        f"{where}: no trainer checkpoint in {actor} "
        "(expected trainer_state.json, or veRL's model_world_size_W_rank_R.pt and fsdp_config.json)"
    )


def is_lora(actor: Path, fmt: str) -> bool:
    if fmt == "tinker":
        return True
    if fmt == "rft-torch":
        return json.loads((actor / "trainer_state.json").read_text()).get("lora") is not None
    return (actor / VERL_LORA_META).is_file()


def is_converted(hf: Path) -> bool:
    if (hf / WEIGHTS).is_file():
        return True
    index = hf / WEIGHTS_INDEX
    if not index.is_file():
        return False
    shards = set(json.loads(index.read_text())["weight_map"].values())
    return all((hf / name).is_file() for name in shards)


def config_source(hf: Path, base_model_dir: Path | None, where: str) -> Path:
    """Where config.json (and the tokenizer) come from: the checkpoint's huggingface/, else the base model."""
    if (hf / "config.json").is_file():
        return hf
    if base_model_dir is None:
        raise FileNotFoundError(f"{where}: {hf / 'config.json'} is missing; pass --base-model-dir to take it from there")
    if not (base_model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{where}: no config.json in {hf} nor in --base-model-dir {base_model_dir}")
    return base_model_dir


def load_unmerged(
    fmt: str, actor: Path, config_dir: Path, base_model_dir: Path | None, work: Path, where: str
) -> Unmerged:
    if fmt == "rft-torch":
        return load_torch_checkpoint(actor, config_dir, base_model_dir, where)
    if fmt == "tinker":
        return load_tinker_checkpoint(actor, base_model_dir, where)
    return load_verl_fsdp(actor, config_dir, base_model_dir, work, where)


def save_adapter(peft_model: torch.nn.Module, target: Path) -> None:
    """peft writes adapter_model.safetensors + adapter_config.json; read back, they must equal the model's."""
    from peft import get_peft_model_state_dict, load_peft_weights

    peft_model.save_pretrained(target)
    expected = get_peft_model_state_dict(peft_model)
    saved = load_peft_weights(str(target))
    if expected.keys() != saved.keys() or any(not torch.equal(expected[k], saved[k]) for k in expected):
        raise RuntimeError(f"{target}: the exported adapter does not read back as written")


def copy_side_files(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for pattern in SIDE_FILES:
        for item in source.glob(pattern):
            if item.name != WEIGHTS_INDEX and not (target / item.name).exists():
                shutil.copy2(item, target / item.name)


def publish_model(saved: Path, hf: Path) -> None:
    """Move what save_pretrained wrote into hf/: stale weights out, shards, then the index/model file last."""
    hf.mkdir(parents=True, exist_ok=True)
    for stale in [*hf.glob("model-*-of-*.safetensors"), hf / WEIGHTS_INDEX]:
        stale.unlink(missing_ok=True)
    files = sorted(saved.iterdir(), key=lambda p: p.name in (WEIGHTS, WEIGHTS_INDEX))
    for item in files:
        if item.name == "generation_config.json" and (hf / item.name).exists():
            continue  # keep the trained model's own sampling defaults
        os.replace(item, hf / item.name)
