"""One veRL worker process: the actor's FSDP engine (and the reference model's) as a Ray actor.

The controller (`backends.verl.trainer.VerlTrainer`) drives a RayWorkerGroup of these. Each holds
veRL's `TrainingWorker`s, as veRL's ActorRolloutRefWorker does without its rollout: methods taking a
batch are dispatched by data-parallel rank (mesh "actor"), the others run on every rank. The code is
the same on CPU and GPU; on CPU the process was started with `backends.verl.cpu.cpu_worker_env()`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import TrainingWorker

from backends.cpu_time import process_tree_cpu_s
from backends.critic import critic_dir
from backends.verl import cpu
from backends.verl.config import WorkerConfigs
from backends.verl.weights import EngineWeights, config_dtype


class VerlWorker(Worker):
    def __init__(self, configs: WorkerConfigs, threads: int, seed: int) -> None:
        cpu.init_process_group()  # CPU only: the group veRL would start is refused by torch
        Worker.__init__(self)
        torch.set_num_threads(max(threads, 1))
        os.environ["OMP_NUM_THREADS"] = str(max(threads, 1))
        self.configs = configs
        self.seed = seed
        self.actor: TrainingWorker | None = None
        self.ref: TrainingWorker | None = None
        self.critic: TrainingWorker | None = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict[str, Any]:
        """Build the engines: HF model → (LoRA) → FSDP → optimizer and lr schedule."""
        torch.manual_seed(self.seed)  # LoRA's A matrices are random: the same start on every run
        self.actor = TrainingWorker(config=self.configs.actor)
        self.actor.reset()
        self.actor.set_loss_fn(self.configs.loss_fn)
        self.set_dispatch_collect(mesh_name="actor", **self.actor.get_dispatch_collect())
        if self.configs.ref is not None:
            self.ref = TrainingWorker(config=self.configs.ref)
            self.ref.reset()
        if self.configs.critic is not None:  # advantage_fn 'ppo': the value model, on the same ranks as the actor
            self.critic = TrainingWorker(config=self.configs.critic)
            self.critic.reset()
            self.critic.set_loss_fn(self.configs.critic_loss_fn)
        return {"rank": self.rank, "pid": os.getpid(), "threads": torch.get_num_threads(), "device": self.actor.device_name}

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def compute_log_prob(self, data: Any) -> Any:
        return _infer(self.actor, data)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def compute_ref_log_prob(self, data: Any) -> Any:
        """The reference model's log-probs: its own engine, or with LoRA the actor with the adapter off."""
        if self.ref is not None:
            return _infer(self.ref, data)
        tu.assign_non_tensor(data, no_lora_adapter=True)
        return _infer(self.actor, data)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def update_actor(self, data: Any) -> Any:
        """One optimizer step (one mini-batch)."""
        return _train(self.actor, data)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def compute_values(self, data: Any) -> Any:
        """The critic's value of the state before each token (jagged, the whole sequence)."""
        return _infer(self.critic, data)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def update_critic(self, data: Any) -> Any:
        """The critic's optimizer steps on the batch (veRL's value_loss on the values and returns it holds)."""
        return _train(self.critic, data)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def cpu_seconds(self) -> float:
        return process_tree_cpu_s()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, path: str, global_step: int) -> None:
        """The actor into `path` (global_step_N/actor), the critic beside it (global_step_N/critic)."""
        self.actor.save_checkpoint(path, global_step=global_step)
        if self.critic is not None:
            self.critic.save_checkpoint(str(critic_dir(Path(path))), global_step=global_step)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, path: str) -> None:
        self.actor.load_checkpoint(path)
        if self.critic is not None:
            self.critic.load_checkpoint(str(critic_dir(Path(path))))

    def _weights(self) -> EngineWeights:
        return EngineWeights(self.actor.engine, config_dtype(self.actor.model_config.hf_config))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def export_weights(self, folder: str) -> str | None:
        """model.safetensors (HF names, LoRA merged, the config's dtype) into `folder`; every rank
        gathers, rank 0 keeps and writes, atomically."""
        from safetensors.torch import save_file

        if self.rank != 0:  # each gather is a collective of every rank; only rank 0 keeps the whole model
            for _ in self._weights():
                pass
            return None
        state = {name: tensor.to("cpu").contiguous() for name, tensor in self._weights()}
        target = Path(folder)
        target.mkdir(parents=True, exist_ok=True)
        tmp = target / f".model.safetensors.{os.getpid()}.tmp"
        save_file(state, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, target / "model.safetensors")
        return str(target / "model.safetensors")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def push_weights(self, transport: Any, engine_actors: list[Any], version: int) -> Any:
        """GPU: stream the weights into the running vLLM workers (vLLM's weight-transfer API); rank 0
        sends, every rank takes part in the gathers."""
        return transport.push_weights(engine_actors, self._weights(), version, rank=self.rank)


def _infer(engine: TrainingWorker, data: Any) -> Any:
    """A forward pass of one engine (the actor, the reference or the critic), its output on the CPU."""
    output = engine.infer_batch(data)
    return output.cpu() if output is not None else None


def _train(engine: TrainingWorker, data: Any) -> Any:
    """An engine's optimizer step(s) on the batch; metrics gain `lr_used`, the lr the step used (veRL's own `lr` is
    read after its scheduler step)."""
    lr = engine.engine.lr_scheduler.get_last_lr()[0]
    output = engine.train_mini_batch(data)
    if output is None:
        return None
    tu.get(output, "metrics")["lr_used"] = [float(lr)]
    return output.cpu()
