"""A Tinker checkpoint: the weights stay on the Tinker server; `actor/tinker_state.json` says where.

    global_step_N/actor/tinker_state.json
        format        "rft-tinker-v1"
        global_step   optimizer steps taken
        state_path    tinker://…/weights/…   save_state: LoRA weights and optimizer (resume, next stage)
        sampler_path  tinker://…             save_weights_for_sampler: the LoRA weights alone (sample, download)
        base_model    the service's name of the base model; rank: LoRA rank
        base_url      the server that holds them (paths are only valid there)
        model_id      the training run on that server

Written by the Tinker trainer (backends/tinker/trainer.py); read back by it to resume, by the next
stage to continue from it, and by `rft convert` to download the adapter and merge it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FORMAT = "rft-tinker-v1"
FILE = "tinker_state.json"


def write(actor_dir: Path, state: dict[str, Any]) -> Path:
    actor_dir.mkdir(parents=True, exist_ok=True)
    target = actor_dir / FILE
    tmp = target.with_name(f".{FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"format": FORMAT, **state}, indent=2, sort_keys=True))
    os.replace(tmp, target)
    return target


def read(actor_dir: Path) -> dict[str, Any] | None:
    """The record of a Tinker checkpoint in `actor_dir`, or None when it is not one."""
    path = Path(actor_dir) / FILE
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    if state.get("format") != FORMAT:
        raise ValueError(f"{path}: unknown Tinker checkpoint format {state.get('format')!r} (expected {FORMAT!r})")
    return state


def of_model_dir(model_dir: str | Path | None) -> dict[str, Any] | None:
    """The Tinker checkpoint a model folder belongs to: a stage's `final/huggingface` (or any
    `global_step_N/actor/huggingface`) sits next to its actor's tinker_state.json."""
    if not model_dir:
        return None
    folder = Path(model_dir).expanduser()
    if not folder.is_dir():
        return None
    return read(folder.parent)


ADAPTER_DIR = "tinker_adapter"  # actor/tinker_adapter/: the downloaded PEFT adapter (rft convert)


def run_and_name(path: str) -> tuple[str, str]:
    """tinker://RUN/NAME, tinker://RUN/sampler_weights/NAME or tinker://RUN/weights/NAME → (RUN, NAME)."""
    parts = path.removeprefix("tinker://").strip("/").split("/")
    if not path.startswith("tinker://") or len(parts) < 2:
        raise ValueError(f"not a tinker:// checkpoint path: {path!r}")
    return parts[0], parts[-1]


def download_adapter(state: dict[str, Any], target: Path, base_url: str | None = None) -> Path:
    """The checkpoint's sampler weights as a PEFT adapter folder `target` (adapter_config.json and
    adapter_model.safetensors), fetched from the Tinker server's archive endpoint.

    `base_url`: where the server is now ($TINKER_BASE_URL when set: a restarted local server has a new
    port), else the one recorded. The adapter's `target_modules` are filled in from its tensors (the
    server writes null, which peft would read as its default, q and v only)."""
    import io
    import shutil
    import tarfile
    import tempfile

    import httpx

    from schemas.secrets import TINKER_URL_ENV, tinker_api_key_with_source

    url = base_url or os.environ.get(TINKER_URL_ENV) or state["base_url"]
    key, source = tinker_api_key_with_source()
    run, name = run_and_name(state["sampler_path"])
    address = f"{url.rstrip('/')}/api/v1/training_runs/{run}/checkpoints/{name}/archive"
    try:
        answer = httpx.get(address, headers={"X-API-Key": key}, follow_redirects=True, timeout=httpx.Timeout(300, connect=10))
        answer.raise_for_status()
    except httpx.HTTPError as exc:
        raise RuntimeError(
            f"could not download the adapter {state['sampler_path']} from {url} (API key from {source}): "
            f"{type(exc).__name__}: {exc}. The archive endpoint is what scripts/tinker-server.sh serves; for a service "
            f"without it, download the checkpoint yourself (e.g. `tinker checkpoint download {state['state_path']}`) "
            f"into {target} as a PEFT adapter folder and run rft convert again"
        ) from None
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        with tarfile.open(fileobj=io.BytesIO(answer.content), mode="r:gz") as archive:
            archive.extractall(tmp, filter="data")
        config = next(Path(tmp).rglob("adapter_config.json"), None)
        if config is None:
            raise RuntimeError(f"{address}: the archive holds no adapter_config.json (not a PEFT adapter)")
        fix_target_modules(config.parent)
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(config.parent), str(target))
    return target


def fix_target_modules(adapter: Path) -> None:
    """Set adapter_config.json's target_modules to the modules its tensors adapt, when it names none."""
    from safetensors import safe_open

    config_file = adapter / "adapter_config.json"
    config = json.loads(config_file.read_text())
    if config.get("target_modules"):
        return
    with safe_open(str(adapter / "adapter_model.safetensors"), framework="pt") as tensors:
        modules = sorted({key.split(".lora_")[0].rsplit(".", 1)[-1] for key in tensors.keys() if ".lora_" in key})
    config["target_modules"] = modules
    config_file.write_text(json.dumps(config, indent=2))
