"""How new weights reach the rollout engines: one small `WeightTransport` per `synchronizer.sync_method`.

Every engine serves its model from a folder of its own (`serve_dir`, under the experiment's `shm_dir`,
/dev/shm/rft/<experiment>-<digest of its folder>/<engine>/, see `backends.local.vllm_engine`). A transport has three parts:

- `export_dir`: where the trainer publishes a folder of safetensors (a `WeightsHandle` of kind folder);
- `send` (driver side): every engine client loads that handle;
- `apply` (inside the engine actor): put the folder's weights into the running `vllm.LLM`.

`checkpoint`: the trainer's safetensors stay in the checkpoint directory; each engine links (same
filesystem) or copies them into its serve folder, then vLLM reloads the weights from that folder.
`memory`: on CPU the trainer exports into a RAM-backed staging folder (/dev/shm) which the engines
hard-link from, then reload — no disk involved. On GPU the tensors are pushed into the running vLLM
workers through vLLM's weight-transfer API (CUDA IPC), no files at all.
`nccl`: vLLM's NCCL weight-transfer backend broadcasts from trainer rank 0 to the workers; where NCCL is
missing (CPU) the same code broadcasts over a gloo group (`backends.local.gloo_transfer`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from backends.rollout import RolloutEngine
from backends.weights import WeightsHandle
from checkpointing import layout

if TYPE_CHECKING:
    import torch
    from vllm import LLM

SHM_ROOT = Path("/dev/shm/rft") if Path("/dev/shm").is_dir() else Path("/tmp/rft")



def shm_dir(experiment_dir: Path, experiment_id: str) -> Path:
    """The experiment's RAM-backed folder. Its name holds a digest of the experiment's folder: two runs of
    one project/name from two checkpoint roots on one machine (a nightly deployment beside a run by hand)
    would otherwise stage, serve and delete each other's weights."""
    digest = hashlib.sha256(str(Path(experiment_dir).resolve()).encode()).hexdigest()[:8]
    return SHM_ROOT / f"{experiment_id}-{digest}"


def memory_staging_dir(experiment_dir: Path, experiment_id: str) -> Path:
    """Where a trainer exports weights for `memory` sync on CPU (RAM-backed)."""
    return shm_dir(experiment_dir, experiment_id) / "staging"


def remove_shared_memory(experiment_dir: Path, experiment_id: str, engines: bool = True, staging: bool = True) -> None:
    """Free what the experiment holds in RAM-backed /dev/shm: the serve folders of its engines (also of
    engines that died while starting) and the trainer's staging folder. Each is ~the model's size in RAM."""
    root = shm_dir(experiment_dir, experiment_id)
    engine_dirs = [p for part in ("rollout-", "aux") for p in root.glob(f"{experiment_id}-{part}*")]
    paths = ([root / "staging"] if staging else []) + (engine_dirs if engines else [])
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):  # still holds the other side's folders
        root.rmdir()


def _remove_versions_below(parent: Path, version: int) -> None:
    for folder in parent.glob("v*"):
        if folder.name[1:].isdigit() and int(folder.name[1:]) < version:
            shutil.rmtree(folder, ignore_errors=True)


def install_safetensors(source_dir: Path, serve_dir: Path) -> list[str]:
    """Put every *.safetensors of `source_dir` into `serve_dir`, replacing the old ones atomically.

    Each file is hard-linked when both folders share a filesystem (instant, no copy) and copied
    otherwise, under a temporary name that is then renamed over the old file, so vLLM never reads a
    half-written file. Stale shards that `source_dir` no longer has are removed (sharding may change).
    """
    source_dir, serve_dir = Path(source_dir), Path(serve_dir)
    shards = sorted(p for p in source_dir.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(f"no *.safetensors in {source_dir} to sync into the engines")
    if source_dir.resolve() == serve_dir.resolve():
        return [p.name for p in shards]
    for shard in shards:
        tmp = serve_dir / f".{shard.name}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            os.link(shard, tmp)
        except OSError:  # another filesystem (disk checkpoint -> /dev/shm)
            shutil.copyfile(shard, tmp)
        os.replace(tmp, serve_dir / shard.name)
    index = source_dir / "model.safetensors.index.json"
    if index.is_file():
        tmp = serve_dir / f".{index.name}.{uuid.uuid4().hex[:8]}.tmp"
        shutil.copyfile(index, tmp)
        os.replace(tmp, serve_dir / index.name)  # replaces a symlink to the base model, not its file
    else:
        (serve_dir / "model.safetensors.index.json").unlink(missing_ok=True)
    names = {p.name for p in shards}
    for old in serve_dir.glob("*.safetensors"):
        if old.name not in names:
            old.unlink()
    return sorted(names)


def reload_from_serve_dir(llm: LLM) -> None:
    """Make a running vLLM re-read its model folder, and drop KV blocks computed by the old weights."""
    # reload_weights with no arguments re-reads model_config.model, i.e. the engine's serve folder.
    llm.collective_rpc("reload_weights")
    after_new_weights(llm)


def after_new_weights(llm: LLM) -> None:
    """What every way of changing a running engine's weights (a reload, a push) ends with: the CPU kernels vLLM
    leaves stale rebuilt, and the KV blocks the old weights computed dropped."""
    refresh_cpu_kernels(llm)
    llm.reset_prefix_cache()


def refresh_cpu_kernels(llm: LLM) -> None:
    """On CPU, rebuild the kernels a weight update leaves stale: the matrix multiply of each layer whose weight
    another layer owns (a tied lm_head), the packed experts of a mixture of experts; on GPU there are none. By name,
    through the engine's worker extension (backends.local.worker_extension): a function would not cross into an
    engine core that runs in a process of its own, as every GPU engine's does."""
    llm.collective_rpc("rft_refresh_cpu_kernels")


# Trainer-side vLLM weight-transfer engines (GPU), kept for the life of the trainer process.
_TRAINER_ENGINES: dict[tuple[Any, ...], tuple[Any, Any]] = {}


class NamedWeights(Protocol):
    """A trainer's weights as HF-named full tensors (e.g. backends.verl.weights.EngineWeights)."""

    def metadata(self) -> list[tuple[str, torch.dtype, tuple[int, ...]]]: ...

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]: ...


def _weight_source(weights: NamedWeights) -> Any:
    """`weights` as a vLLM WeightSource (metadata without gathering, then the tensors in the same order)."""
    from vllm.distributed.weight_transfer import ParamMeta, WeightSource

    class Source(WeightSource):
        def metadata(self) -> list[ParamMeta]:
            return [ParamMeta(name, dtype, tuple(shape)) for name, dtype, shape in weights.metadata()]

        def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
            return iter(weights)

    return Source()


def _actor_id(actor: Any) -> str:
    """A Ray actor's id: stable across deserialised copies of its handle (unlike id())."""
    actor_id = getattr(actor, "_actor_id", None)
    return actor_id.hex() if actor_id is not None else str(id(actor))


def _bounded(fn: Callable[[], Any], timeout_s: float | None, what: str) -> Any:
    """fn() in a daemon thread, waited for at most `timeout_s`: a transfer blocked on a peer that is
    gone (an NCCL call never returns) becomes a TimeoutError instead of a hang."""
    if timeout_s is None:
        return fn()
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as err:  # noqa: BLE001  re-raised in the caller
            result["error"] = err

    thread = threading.Thread(target=run, name="rft-weight-push", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(
            f"{what} did not finish within synchronizer.sync_timeout ({timeout_s:.0f} s): a rollout engine or the "
            "weight-transfer group is gone; the engines are revived and weights sent again on the task's retry"
        )
    if "error" in result:
        raise result["error"]
    return result.get("value")


def _check_engines_alive(actors: Sequence[Any], timeout_s: float | None) -> None:
    """Every engine actor answers, or an error names the ones that do not (before any rendezvous)."""
    import ray

    dead = []
    for actor in actors:
        try:
            ray.get(actor.model_version.remote(), timeout=min(timeout_s or 60.0, 60.0))
        except Exception as err:  # noqa: BLE001  RayActorError, GetTimeoutError, ...
            dead.append(f"{_actor_id(actor)[:12]} ({type(err).__name__})")
    if dead:
        raise RuntimeError(f"cannot push weights: rollout engine(s) {', '.join(dead)} do not answer")


def _check_engines_alive_on_every_rank(actors: Sequence[Any], timeout_s: float | None, rank: int) -> None:
    """The sender checks the engines and tells the other trainer ranks (a broadcast over the trainer's
    own group), so that all stop before their first gather when one is dead: a non-sender left in the
    gathers would wait for the sender until sync_timeout. The others must not ask the engines
    themselves: an engine serves one call at a time, and a question queued behind the sender's
    update_weights (which waits for the gathers) would never be answered."""
    import torch
    import torch.distributed as dist

    error = None
    if rank == 0:
        try:
            _check_engines_alive(actors, timeout_s)
        except RuntimeError as err:
            error = err
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        failed = torch.tensor([1 if error else 0], dtype=torch.int32)  # on CPU: the group's gloo side
        dist.broadcast(failed, src=0)
        if failed.item() and error is None:
            raise RuntimeError(f"cannot push weights: trainer rank 0 found rollout engine(s) that do not answer (rank {rank} stops too)")
    if error is not None:
        raise error


class TimedEngineClient:
    """vLLM's RayVLLMWeightSyncClient with every call bounded by `timeout_s` and a clear error when an
    engine actor is gone (that client waits forever), and each engine given ranks of its own in the group.

    vLLM's trainer side tells every engine that its workers start at rank 1 (`rank_offset`), which holds for
    one engine, or for one engine with data-parallel ranks. Our engines are separate vLLM instances, each at
    data-parallel index 0: engine i's workers start at 1 + i × `workers_per_engine`, else two engines claim
    the same ranks and the rendezvous never completes."""

    def __init__(self, actors: Sequence[Any], timeout_s: float | None, workers_per_engine: int = 1) -> None:
        self.handles = list(actors)
        self.timeout_s = timeout_s
        self.workers_per_engine = workers_per_engine

    def _all(self, method: str, *args: Any) -> None:
        self._each(method, [args] * len(self.handles))

    def _each(self, method: str, args_per_engine: Sequence[tuple[Any, ...]]) -> None:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            calls = [getattr(h, method).remote(*args) for h, args in zip(self.handles, args_per_engine, strict=True)]
            ray.get(calls, timeout=self.timeout_s)
        except GetTimeoutError as err:
            raise TimeoutError(f"rollout engines did not answer {method} within synchronizer.sync_timeout "
                               f"({self.timeout_s} s)") from err
        except RayActorError as err:
            raise RuntimeError(f"a rollout engine died during {method}: {err}") from err

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        if "rank_offset" not in init_info:  # ipc: no group of ranks
            self._all("init_weight_transfer_engine", WeightTransferInitRequest(init_info=init_info))
            return
        first = int(init_info["rank_offset"])
        self._each("init_weight_transfer_engine", [
            (WeightTransferInitRequest(init_info={**init_info, "rank_offset": first + i * self.workers_per_engine}),)
            for i in range(len(self.handles))
        ])

    def start_weight_update(self) -> None:
        self._all("start_weight_update")

    def update_weights(self, update_info: Any) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        self._all("update_weights", WeightTransferUpdateRequest(update_info=update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._all("finish_weight_update")


class WeightTransport(ABC):
    """One way of moving trainer weights into running rollout engines."""

    sync_method: ClassVar[str]

    def __init__(self, use_gpu: bool, timeout_s: float | None = None) -> None:
        self.use_gpu = use_gpu
        self.timeout_s = timeout_s  # synchronizer.sync_timeout: longest a push may take (None: no bound)

    def llm_kwargs(self) -> dict[str, Any]:
        """Extra `vllm.LLM(...)` arguments the engine side needs (e.g. a weight-transfer backend)."""
        return {}

    def export_dir(self, experiment_dir: Path, experiment_id: str, version: int) -> Path:
        """Where the trainer exports version `version` of its weights (one folder per version, so an
        engine can load an exact version while a newer one is being written)."""
        return layout.sync_dir(experiment_dir) / f"v{version}"

    def prune(self, experiment_dir: Path, experiment_id: str, keep_from: int) -> None:
        """Remove the exported versions older than `keep_from` (the engines serve it or newer)."""
        _remove_versions_below(self.export_dir(experiment_dir, experiment_id, keep_from).parent, keep_from)

    @property
    def pushes_tensors(self) -> bool:
        """True where the trainer streams tensors into the engines itself (GPU memory / nccl)."""
        return False

    @abstractmethod
    def apply(self, llm: LLM, serve_dir: Path, model_dir: Path) -> None:
        """Engine side (inside the actor): make `llm` serve the weights in `model_dir`."""

    def send(self, engines: Sequence[RolloutEngine], weights: WeightsHandle) -> float:
        """Every engine serves `weights`, all at once; returns seconds."""
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(len(engines), 1)) as pool:
            list(pool.map(lambda engine: engine.load_weights(weights), engines))
        return time.perf_counter() - start


class CheckpointTransport(WeightTransport):
    """Safetensors in the checkpoint directory; engines link/copy them and reload."""

    sync_method = "checkpoint"

    def apply(self, llm: LLM, serve_dir: Path, model_dir: Path) -> None:
        install_safetensors(model_dir, serve_dir)
        reload_from_serve_dir(llm)


class MemoryTransport(WeightTransport):
    """In memory: /dev/shm + reload on CPU; tensors pushed over CUDA IPC into the workers on GPU."""

    sync_method = "memory"
    gpu_backend = "ipc"  # vLLM weight-transfer backend (trainer and engine on the same GPU)

    @property
    def transfer_backend(self) -> str:
        """The vLLM weight-transfer backend the tensors are pushed with."""
        return self.gpu_backend

    def llm_kwargs(self) -> dict[str, Any]:
        return {"weight_transfer_config": {"backend": self.transfer_backend}} if self.pushes_tensors else {}

    @property
    def pushes_tensors(self) -> bool:
        return self.use_gpu

    def export_dir(self, experiment_dir: Path, experiment_id: str, version: int) -> Path:
        return memory_staging_dir(experiment_dir, experiment_id) / f"v{version}"

    def apply(self, llm: LLM, serve_dir: Path, model_dir: Path) -> None:
        # Staging and serve folders are both on /dev/shm: hard links, no bytes copied. On GPU this is
        # the folder fallback; the fast path there is push_module, called where the trainer's module is.
        install_safetensors(model_dir, serve_dir)
        reload_from_serve_dir(llm)

    def push_module(self, engine_actors: Sequence[Any], module: torch.nn.Module, version: int) -> WeightsHandle:
        """GPU, inside the trainer's process: stream `module`'s parameters into the running vLLM workers."""
        from vllm.distributed.weight_transfer import ModuleSource

        return self._push(engine_actors, ModuleSource(module), version, rank=0)

    def push_weights(self, engine_actors: Sequence[Any], weights: NamedWeights, version: int, rank: int = 0) -> WeightsHandle:
        """GPU, on every rank of a sharded trainer: stream `weights` (HF-named full tensors; iterating them
        gathers, so every rank iterates) into the running vLLM workers; rank 0 sends."""
        return self._push(engine_actors, _weight_source(weights), version, rank=rank)

    def _push(self, engine_actors: Sequence[Any], source: Any, version: int, rank: int) -> WeightsHandle:
        """vLLM's weight-transfer API: the engine actors expose init_weight_transfer_engine /
        start_weight_update / update_weights / finish_weight_update, which the trainer-side engine drives
        through a client; the engines then load the returned handle, which only stamps the version.

        Every call to the engines and the whole transfer are bounded by `timeout_s`
        (synchronizer.sync_timeout): a dead engine or a broken transfer group is an error naming it,
        never a hang, and the next push makes a new rendezvous."""
        if not self.pushes_tensors:
            raise RuntimeError(f"sync_method {self.sync_method!r} pushes no tensors here; publish a folder of safetensors")
        from vllm.distributed.weight_transfer import WeightTransferTrainerFactory

        backend = self.transfer_backend
        actors = list(engine_actors)
        key = (backend, tuple(_actor_id(a) for a in actors), rank)
        _check_engines_alive_on_every_rank(actors, self.timeout_s, rank)
        try:
            if key not in _TRAINER_ENGINES:  # the rendezvous (an NCCL group) is made once, then reused
                client = TimedEngineClient(actors, self.timeout_s, self.workers_per_engine)
                info = self._trainer_init_info(len(actors), rank)
                _TRAINER_ENGINES[key] = (client, _bounded(
                    lambda: WeightTransferTrainerFactory.trainer_init(info, client=client, source=source),
                    self.timeout_s, f"the {backend} weight-transfer rendezvous with {len(actors)} engine(s)",
                ))
            _, trainer_engine = _TRAINER_ENGINES[key]
            trainer_engine.source = source  # this push's weights
            # start_weight_update, the tensors, finish_weight_update
            _bounded(trainer_engine.send_weights, self.timeout_s, f"pushing weights version {version}")
        except BaseException:
            _TRAINER_ENGINES.pop(key, None)  # a failed group is not reused
            raise
        return WeightsHandle(version=version, kind="pushed", location=self.sync_method)

    @property
    def workers_per_engine(self) -> int:
        """Ranks each engine's workers take in the transfer group (its tensor-parallel size)."""
        return 1

    def _trainer_init_info(self, num_engines: int, rank: int = 0) -> Any:
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

        return IPCTrainerInitInfo(rank=rank)


class NcclTransport(MemoryTransport):
    """vLLM's NCCL weight-transfer backend, trainer rank 0 broadcasting to the workers; on CPU the same
    engines over a gloo group (the code path is the same, only the group's backend differs)."""

    sync_method = "nccl"
    gpu_backend = "nccl"

    def __init__(self, use_gpu: bool, tensor_parallel_size: int = 1, timeout_s: float | None = None) -> None:
        super().__init__(use_gpu, timeout_s)
        self.tensor_parallel_size = tensor_parallel_size

    @property
    def transfer_backend(self) -> str:
        from backends.local import gloo_transfer

        if self.use_gpu:
            return self.gpu_backend
        gloo_transfer.register()  # in this process (trainer or engine), before vLLM looks the name up
        return gloo_transfer.BACKEND

    @property
    def pushes_tensors(self) -> bool:
        return True

    @property
    def workers_per_engine(self) -> int:
        return self.tensor_parallel_size

    def _trainer_init_info(self, num_engines: int, rank: int = 0) -> Any:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo
        from vllm.utils.network_utils import get_ip, get_open_port

        from backends.local import gloo_transfer

        # one trainer sender + every worker of every engine (other trainer ranks only gather)
        world_size = 1 + num_engines * self.tensor_parallel_size
        if not self.use_gpu:
            return gloo_transfer.trainer_init_info(rank, world_size, self.timeout_s)
        return NCCLTrainerInitInfo(rank=rank, master_address=get_ip(), master_port=get_open_port(), world_size=world_size)


def make_transport(
    sync_method: str, use_gpu: bool, tensor_parallel_size: int = 1, timeout_s: float | None = None
) -> WeightTransport:
    """The transport for `synchronizer.sync_method` (validation has turned Trinity's names into ours)."""
    if sync_method == "checkpoint":
        return CheckpointTransport(use_gpu, timeout_s)
    if sync_method == "memory":
        return MemoryTransport(use_gpu, timeout_s)
    if sync_method == "nccl":
        return NcclTransport(use_gpu, tensor_parallel_size, timeout_s)
    raise ValueError(f"synchronizer.sync_method={sync_method!r} is not one of 'nccl', 'memory', 'checkpoint'")
