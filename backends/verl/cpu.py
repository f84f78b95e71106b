"""Every change veRL 0.9.1 needs to train on CPU, in one place. Nothing here runs on GPUs.

veRL's worker processes load this module themselves, at `import verl`, when their environment is
`cpu_worker_env()`: `VERL_USE_EXTERNAL_MODULES` names it (verl/__init__.py:49-52 imports the
modules it lists), so the platform below is registered before anything in veRL asks for a device.
The workers' training step is the same code on CPU and GPU; only the device layer differs.

1. No CPU platform: with no accelerator veRL falls back to 'nvidia'
   (verl/plugin/platform/platform_manager.py:114-117), so get_device_id() calls
   torch.cuda.current_device() and fails. `PlatformCPU` is registered as "cpu" and chosen by
   VERL_PLATFORM=cpu (platform_manager.py:92-95).
2. torch.cpu lacks the torch.cuda calls veRL makes unconditionally: max_memory_allocated/reserved
   after every step (verl/workers/engine_workers.py:219-220), empty_cache() everywhere.
   `_CpuDeviceModule` is torch.cpu plus those, answering 0 / doing nothing.
3. The FSDP engine registers itself for devices "cuda" and "npu" only
   (verl/workers/engine/fsdp/transformer_impl.py:1143); VERL_ENGINE_DEVICE=cuda
   (verl/workers/engine/base.py:405-406) selects that same class. Nothing moves to CUDA: device
   ids come from the platform.
4. veRL starts its process group with the backend f"cpu:gloo,{device}:{nccl backend}"
   (verl/utils/distributed.py:89), "cpu:gloo,cpu:gloo" here, which torch refuses ("Duplicate device
   type cpu"). `init_process_group()` starts a plain gloo group first; veRL then skips its own
   (distributed.py:90, `if not is_initialized()`).
5. A forward-only engine (the reference model) always gets CPUOffloadPolicy(pin_memory=True)
   (transformer_impl.py:459-463); pinning needs an accelerator (torch/distributed/fsdp/
   _fully_shard/_fsdp_param.py:315: "Cannot access accelerator device when none is available").
   The same policy without pinning is exact (parameters already live in CPU memory); it replaces
   torch's class before verl.utils.fsdp_utils imports it (this module is imported first).
6. A value model (PPO's critic) is loaded with attn_implementation="flash_attention_2" written into the call
   (verl/utils/model.py:load_valuehead_model); flash-attn needs CUDA. The same load with the attention the
   model's config names (sdpa here, as the actor's) replaces it; the engine imports it at each build.
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from typing import Any

import torch

# (1) + (3): what a CPU worker's environment needs before it imports verl.
MODULE = __name__  # "backends.verl.cpu"


def cpu_worker_env() -> dict[str, str]:
    """Environment of a veRL worker process on a CPU-only cluster (set before it imports verl)."""
    return {"VERL_USE_EXTERNAL_MODULES": MODULE, "VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda"}


def is_active() -> bool:
    """True in a process started with `cpu_worker_env()`."""
    return os.environ.get("VERL_PLATFORM") == "cpu"


def init_process_group() -> None:
    """(4) Start this worker's gloo group (RANK, WORLD_SIZE, MASTER_* come from veRL's RayWorkerGroup,
    verl/single_controller/ray/base.py:633-641) before veRL builds its "cpu:gloo,cpu:gloo" one."""
    import torch.distributed as dist

    if is_active() and not dist.is_initialized():
        dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))


def _zero(*_args: Any, **_kwargs: Any) -> int:
    return 0


def _nothing(*_args: Any, **_kwargs: Any) -> None:
    return None


class _CpuDeviceModule(types.ModuleType):
    """(2) torch.cpu, plus the torch.cuda-style calls veRL makes on its device module."""

    def __init__(self) -> None:
        super().__init__("rft_verl_cpu_device")
        for name in ("empty_cache", "ipc_collect", "reset_peak_memory_stats", "set_per_process_memory_fraction"):
            setattr(self, name, _nothing)
        for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
            setattr(self, name, _zero)
        self.mem_get_info = lambda *a, **k: (0, 0)
        self.manual_seed = torch.manual_seed
        self.manual_seed_all = torch.manual_seed
        self.get_rng_state = torch.get_rng_state
        self.set_rng_state = torch.set_rng_state
        self.get_device_name = lambda *a, **k: "cpu"

    def __getattr__(self, name: str) -> Any:  # everything else is torch.cpu's own
        return getattr(torch.cpu, name)


def _register_platform() -> None:
    """(1) The "cpu" platform; only VERL_PLATFORM=cpu selects it (it is never auto-detected)."""
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    if "cpu" in PlatformRegistry.registered_names():
        return
    device_module = _CpuDeviceModule()

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: device_module)

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return False

        def current_device(self) -> Any:
            return "cpu"  # used as `tensor.to(get_device_id())`

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str):  # noqa: ANN201
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {}  # a CPU worker asks Ray for nothing beyond its placement-group bundle

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None


def _unpinned_cpu_offload() -> None:
    """(5) FSDP2's CPU offload without pinned memory, under the name veRL imports."""
    import torch.distributed.fsdp as fsdp

    if getattr(fsdp.CPUOffloadPolicy, "_rft_unpinned", False):
        return

    class UnpinnedCPUOffloadPolicy(fsdp.CPUOffloadPolicy):
        _rft_unpinned = True

        def __init__(self, pin_memory: bool = False) -> None:
            super().__init__(pin_memory=False)

    fsdp.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def _value_model_attention() -> None:
    """(6) veRL's value-model load, with the attention of the model's config instead of flash_attention_2."""
    import verl.utils.model as model_utils

    if getattr(model_utils.load_valuehead_model, "_rft_cpu", False):
        return

    def load_valuehead_model(local_path: str, torch_dtype: Any, model_config: Any, trust_remote_code: bool) -> Any:
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(
            local_path, torch_dtype=torch_dtype, config=model_config, trust_remote_code=trust_remote_code,
            attn_implementation=getattr(model_config, "_attn_implementation", None) or "sdpa",
        )

    load_valuehead_model._rft_cpu = True  # type: ignore[attr-defined]
    model_utils.load_valuehead_model = load_valuehead_model


if is_active():  # imported by verl/__init__.py in a CPU worker
    _register_platform()
    _unpinned_cpu_offload()
    _value_model_attention()
