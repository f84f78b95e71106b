"""`checkpoint_root_dir`: creatable, writable, with room for the checkpoints the run writes."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import algorithms
from backends.errors import ConfigError
from buffer.taskset import TasksetError, compute_total_steps, load_taskset
from checkpointing.models import OFFLINE_GGUF_MODELS, model_cache_dir
from schemas import ExperimentConfig


def check_checkpoint_root_dir(config: ExperimentConfig) -> list[str]:
    """`checkpoint_root_dir`: creatable and writable, with room for the checkpoints the run writes
    (about: model size × 3 for weights and Adam's two moments, every `trainer.save_interval` steps and
    at the end, plus the converted final model)."""
    field = "checkpoint_root_dir"
    root = Path(config.checkpoint_root_dir).expanduser().resolve()
    existing = writable_ancestor(field, root)
    need, why = _checkpoint_bytes(config)
    free = shutil.disk_usage(existing).free
    if need and free < need:
        raise ConfigError(
            field, f"{free / 1e9:.1f} GB free on {existing}, but the run writes about {need / 1e9:.1f} GB ({why})"
        )
    room = f"{free / 1e9:.0f} GB free"
    if need:
        room += f", about {need / 1e9:.1f} GB needed ({why})"
    elif why:  # nothing written here, and why (a Tinker run)
        room += f" ({why})"
    return [f"{field}: {root} is writable, {room}"]


def writable_ancestor(field: str, path: Path) -> Path:
    """The folder `path` is or would be created in, checked writable (a temporary file in it)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(field, f"{path} cannot be created: {existing} is a file")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".rft-preflight-"):
            pass
    except OSError as err:
        raise ConfigError(field, f"{path} is not writable: {err.strerror} ({existing})") from None
    return existing


def _checkpoint_bytes(config: ExperimentConfig) -> tuple[int, str]:
    """About how many bytes the run's checkpoints take, and how that was estimated (0: unknown, or none
    written here)."""
    if config.trainer.WEIGHTS != "local":  # a checkpoint here is a few tinker:// paths (checkpointing/tinker_state.py)
        return 0, f"{config.trainer.trainer_type} keeps the weights of its checkpoints on its server"
    weights = _model_bytes(config)
    if not weights:
        return 0, ""
    steps = config.buffer.total_steps
    if steps is None and config.buffer.explorer_input.taskset is not None:
        try:
            tasks = len(load_taskset(config.buffer.explorer_input.taskset))
        except (TasksetError, ValueError):
            return 0, ""  # check_tasksets names that problem
        steps = compute_total_steps(tasks, config.buffer.batch_size, config.buffer.total_epochs)
    steps = steps or 1
    interval = config.trainer.save_interval or steps
    saved = len({s for s in range(interval, steps + 1, interval)} | {steps})
    if (keep := config.trainer.max_checkpoints_to_keep) is not None:
        saved = min(saved, keep + 1)  # the older ones are deleted once the next one is whole
    lora = bool(config.model.lora_configs)
    per = weights // 20 if lora else weights * 3  # weights and Adam's two moments (or a LoRA adapter's)
    if algorithms.needs_critic(config.algorithm):  # global_step_N/critic: a whole model and its Adam moments
        per += weights * 3
    need = int((saved * per + weights) * 1.1)  # + the converted final model, + 10 %
    kept = "" if keep is None else f", trainer.max_checkpoints_to_keep={keep}"
    return need, (f"{saved} checkpoint(s) of ~{per / 1e9:.1f} GB (trainer.save_interval={config.trainer.save_interval}, "
                  f"{steps} steps{kept}) and the final model")


def _model_bytes(config: ExperimentConfig) -> int:
    """The model's weights as the trainer keeps them (float32 unless trainer.dtype says otherwise)."""
    path = config.model.model_path or ""
    folder = Path(path).expanduser()
    if not folder.is_dir() and path in OFFLINE_GGUF_MODELS:
        folder = model_cache_dir() / path
    files = [p for p in folder.glob("*") if p.suffix in (".safetensors", ".bin")] if folder.is_dir() else []
    if not files:
        return 0
    size = sum(p.stat().st_size for p in files)
    cfg = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    stored = 2 if str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32") in ("bfloat16", "float16") else 4
    trained = 2 if getattr(config.trainer, "dtype", "float32") in ("bfloat16", "float16") else 4
    return size * trained // stored
