"""vLLM's dense weight-transfer backend over a gloo process group: the `nccl` push where NCCL is missing.

vLLM 0.30's weight-transfer API (LLM.init_weight_transfer_engine / start_weight_update / update_weights /
finish_weight_update) works on its CPU build: the CPU worker inherits it from the GPU worker
(vllm/v1/worker/cpu_worker.py: `CPUWorker(Worker)`). Its built-in backends do not: `nccl` opens a
PyNcclCommunicator and `ipc` shares CUDA memory. This backend is vLLM's own NCCL engines (trainer rank 0
sends, the other trainer ranks only take part in the gathers, the engine workers join at rank 1...) with
the group swapped for a gloo one, registered under "gloo" in both of vLLM's factories (they accept custom
backends). Tensors are broadcast one by one (vLLM's packed path drives CUDA streams).
"""

from __future__ import annotations

import datetime
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from vllm.distributed.weight_transfer.base import ParamMeta, VLLMWeightSyncClient, WeightSource
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory
from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo, worker_init_payload
from vllm.distributed.weight_transfer.nccl_engine import (
    NCCLTrainerInitInfo,
    NCCLTrainerWeightTransferEngine,
    NCCLWeightTransferEngine,
    NCCLWeightTransferUpdateInfo,
)

BACKEND = "gloo"
DEFAULT_TIMEOUT_S = 1800.0  # gloo's own default; the transport passes synchronizer.sync_timeout


class GlooGroup:
    """A gloo process group of its own (its own TCP store), outside torch.distributed's global state:
    a veRL worker already has its default group (the FSDP ranks) and this one must not disturb it."""

    def __init__(self, host: str, port: int, rank: int, world_size: int, timeout_s: float) -> None:
        from torch._C._distributed_c10d import ProcessGroupGloo
        from torch.distributed import PrefixStore, TCPStore

        timeout = datetime.timedelta(seconds=timeout_s)
        store = TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout)
        self.group = ProcessGroupGloo(PrefixStore("rft-weight-transfer", store), rank, world_size, timeout)
        self.store = store  # the group talks through it: keep it alive

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        from torch._C._distributed_c10d import BroadcastOptions

        options = BroadcastOptions()
        options.rootRank = src
        self.group.broadcast([tensor], options).wait()


@dataclass(kw_only=True)
class GlooWeightTransferInitInfo(NCCLWeightTransferInitInfo):
    """Engine side: where to meet the trainer, this engine's first rank, and how long to wait."""

    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass
class GlooTrainerInitInfo(NCCLTrainerInitInfo):
    backend: ClassVar[str] = BACKEND

    packed: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S


class GlooWeightTransferEngine(NCCLWeightTransferEngine):
    """Inside a vLLM worker: receive each tensor from trainer rank 0 and load it (layerwise reload)."""

    init_info_cls = GlooWeightTransferInitInfo

    def init_transfer_engine(self, init_info: GlooWeightTransferInitInfo) -> None:
        parallel = self.parallel_config
        rank = parallel.data_parallel_index * parallel.world_size + parallel.rank + init_info.rank_offset
        self.packed = False
        self.model_update_group = GlooGroup(  # type: ignore[assignment]
            init_info.master_address, init_info.master_port, rank, init_info.world_size, init_info.timeout_s
        )

    def receive_weights(self, update_info: NCCLWeightTransferUpdateInfo) -> None:
        if self.model_update_group is None:
            raise RuntimeError("gloo weight transfer not initialised: call init_transfer_engine first")
        for name, dtype_name, shape in zip(update_info.names, update_info.dtype_names, update_info.shapes, strict=True):
            weight = torch.empty(shape, dtype=getattr(torch, dtype_name), device=self.device)
            self.model_update_group.broadcast(weight, src=0)
            self.model.load_weights([(name, weight)])


class GlooTrainerWeightTransferEngine(NCCLTrainerWeightTransferEngine):
    """Trainer side: rank 0 opens the group as rank 0 and drives the engines; other ranks only gather."""

    init_info_cls = GlooTrainerInitInfo

    @classmethod
    def trainer_init(
        cls, init_info: GlooTrainerInitInfo, *, client: VLLMWeightSyncClient, source: WeightSource | None = None
    ) -> GlooTrainerWeightTransferEngine:
        if source is None:
            raise ValueError("the gloo weight transfer needs a WeightSource")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender, packed=False)
        if not engine.is_sender:
            return engine
        worker_info = GlooWeightTransferInitInfo(
            master_address=init_info.master_address, master_port=init_info.master_port, rank_offset=1,
            world_size=init_info.world_size, timeout_s=init_info.timeout_s,
        )
        # the engines block in init_weight_transfer_engine until every rank has joined: meet them there
        with ThreadPoolExecutor(max_workers=1) as pool:
            joined = pool.submit(client.init_weight_transfer_engine, worker_init_payload(worker_info))
            engine.model_update_group = GlooGroup(  # type: ignore[assignment]
                init_info.master_address, init_info.master_port, 0, init_info.world_size, init_info.timeout_s
            )
            joined.result()
        return engine

    def _broadcast(self, source: WeightSource, meta: list[ParamMeta]) -> None:
        if not self.is_sender:
            for _ in source:  # the gathers are collectives of every trainer rank
                pass
            return
        for _name, tensor in self._checked_iter(source, meta):
            self.model_update_group.broadcast(tensor.contiguous(), src=0)  # type: ignore[union-attr]


def register() -> None:
    """Make "gloo" a weight-transfer backend of this process (the trainer's, and the engine's before its
    vllm.LLM is built: its worker looks the backend up while it loads the model)."""
    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, GlooWeightTransferEngine)
    if BACKEND not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(BACKEND, GlooTrainerWeightTransferEngine)


def trainer_init_info(rank: int, world_size: int, timeout_s: float | None) -> Any:
    """Rank `rank`'s init info; the address and port are rank 0's, where the group's store listens."""
    from vllm.utils.network_utils import get_ip, get_open_port

    return GlooTrainerInitInfo(
        rank=rank, master_address=get_ip(), master_port=get_open_port(), world_size=world_size,
        timeout_s=timeout_s or DEFAULT_TIMEOUT_S,
    )
