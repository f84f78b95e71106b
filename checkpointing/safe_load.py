"""Nothing is unpickled from disk: every `.pt` file a checkpoint holds loads with `torch.load(weights_only=True)`.

weights_only=True is PyTorch's restricted unpickler: tensors, numbers, strings, lists, dicts and the few
classes PyTorch or we allow; any other class or function named in the file is an error instead of a call.
Allowed beyond PyTorch's own list: DTensor and its mesh and placements (importing torch.distributed.tensor
registers them; veRL's FSDP shards hold them) and numpy arrays (veRL's RNG state; their contents go
through the same restricted unpickler). A file that needs anything else is refused, naming the file.

veRL's checkpoint manager loads its own files with weights_only=False: `check_folder` loads every `.pt`
file of the folder this way first, so veRL unpickles only files that hold nothing but allowed types.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

PICKLED_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle")


class UnsafeCheckpointError(ValueError):
    """A checkpoint file that only loads by running what it names (a pickle beyond tensors and numbers)."""


def _numpy_arrays() -> list[Any]:
    """What a pickled numpy array names: its reconstructor, ndarray, dtype and the dtype classes."""
    from numpy.dtypes import Float64DType, Int64DType, UInt32DType

    reconstruct = np._core.multiarray._reconstruct  # numpy 2: what pickled arrays name (numpy._core)
    return [reconstruct, np.ndarray, np.dtype, UInt32DType, Int64DType, Float64DType]


def load_tensors(path: Path, map_location: str = "cpu", mmap: bool = False) -> Any:
    """`torch.load(path, weights_only=True)` with DTensors and numpy arrays allowed; UnsafeCheckpointError
    naming the file and what it asked for when it needs anything else."""
    import torch.distributed.tensor  # noqa: F401  registers DTensor, DeviceMesh and placements as safe

    with torch.serialization.safe_globals(_numpy_arrays()):
        try:
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
        except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError) as err:
            if not _refused_by_unpickler(err):
                raise
            names = _unsafe_names(path)
            raise UnsafeCheckpointError(
                f"{path}: refused: loading it would unpickle {', '.join(names) or 'objects'}, which can run code; "
                "a checkpoint file may hold only tensors, numbers, strings, lists and dicts (safetensors, or "
                "torch.save of those). Only if you trust who wrote it, convert it yourself."
            ) from None


def check_folder(folder: Path) -> list[Path]:
    """Load every pickle-format file below `folder` restrictedly (UnsafeCheckpointError at the first that
    needs more); returns the files checked."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.suffix in PICKLED_SUFFIXES)
    for path in files:
        load_tensors(path, mmap=path.suffix in (".pt", ".pth", ".bin"))
    return files


def _refused_by_unpickler(err: BaseException) -> bool:
    text = str(err)
    return isinstance(err, pickle.UnpicklingError) or "Weights only load failed" in text or "weights_only" in text


def _unsafe_names(path: Path) -> list[str]:
    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:  # not a torch zip file: a bare pickle
        return []
