"""`VerlTrainer`: the TrainerBackend on veRL 0.9.1's engine workers, one process or several, on Ray.

It runs where the policy hosts trainers (the trainer actor) and drives a RayWorkerGroup of
`backends.verl.worker.VerlWorker`s placed on the trainer's devices: one worker per trainer GPU, or
`trainer.cpu_workers` on a cluster without GPUs (FSDP2 over gloo). Each step is veRL's own: its
engines, its ppo_loss (algorithms.verl_compat maps our settings), its optimizer and lr schedule,
its checkpoint layout (`model_world_size_W_rank_R.pt` ... under our `global_step_N/actor/`).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

import algorithms
from backends.critic import critic_dir
from backends.local import capacity
from backends.reward_kl import STATE_KEY, RewardKL, penalise_before_step
from backends.trainer import TrainerBackend, TrainerDevices
from backends.verl import batch as vb
from backends.verl import cpu, placement
from backends.verl.config import is_sft, verl_tree, worker_configs
from backends.verl.critic import VerlCritic
from backends.verl.losses import STEP
from backends.weights import WeightsHandle
from buffer.experience import Experience
from checkpointing.models import resolve_model_path
from checkpointing.safe_load import check_folder
from schemas.trainer import VerlTrainerConfig

if TYPE_CHECKING:
    from schemas import ExperimentConfig

logger = logging.getLogger(__name__)

STATE_FILE = "rft_verl_state.json"  # beside veRL's shards: the step count (veRL keeps none of its own)


class VerlTrainer(TrainerBackend):
    def __init__(
        self, config: ExperimentConfig, model_dir: Path, total_steps: int, devices: TrainerDevices | None = None
    ) -> None:
        import ray

        if not ray.is_initialized():
            raise RuntimeError("the veRL trainer starts its workers on Ray: connect to the cluster first")
        devices = devices or TrainerDevices(gpus=int(ray.cluster_resources().get("GPU", 0)), threads=1)
        self.config = config
        self.settings = config.trainer
        self.places_gpus = devices.gpus > 0  # Ray places the workers by GPU ...
        self.use_gpu = self.places_gpus and capacity.gpus_compute()  # ... and they compute on them
        self.layout = _gpu_layout(devices.gpus) if self.places_gpus else [self.settings.cpu_workers]
        self.num_workers = sum(self.layout)
        self.tree = verl_tree(config, model_dir, total_steps, self.use_gpu)
        ref_path = config.model.ref_model_path
        self.configs = worker_configs(self.tree, sft=is_sft(config),
                                      reference=algorithms.needs_reference_model(config.algorithm) and not is_sft(config),
                                      ref_model_path=str(resolve_model_path(ref_path)) if ref_path else None,
                                      algorithm=config.algorithm)
        self.reward_kl = RewardKL.for_algorithm(config.algorithm)  # algorithm.kl_penalty_fn
        self.temperature = float(self.tree.actor_rollout_ref.rollout.temperature)
        tokenizer = self.configs.actor.model_config.tokenizer
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.critic: VerlCritic | None = None  # made with the workers below
        # Our whole loss as the engine's (dpo, the mix family): it scores the reference itself when it compares
        name = config.algorithm.policy_loss_fn
        self.whole_ref = VerlTrainerConfig.runs_whole(name) and algorithms.needs_reference_model(config.algorithm)
        self.expert_rows = algorithms.uses_expert_rows(name)  # the mix family: expert rows beside sampled ones
        sp = self.settings.ulysses_sequence_parallel_size
        if self.num_workers % sp:
            raise ValueError(
                f"trainer.ulysses_sequence_parallel_size={sp} does not divide the {self.num_workers} training processes"
            )
        self.dp_size = self.num_workers // sp
        self._step = 0
        self._pool, self.workers = self._start_workers(devices)
        if self.configs.critic is not None:  # advantage_fn 'ppo' (GAE): the workers hold a value model too
            self.critic = VerlCritic(self.workers, config, self.pad_token_id, self.temperature)

    # -- workers -------------------------------------------------------------------------------

    def _start_workers(self, devices: TrainerDevices) -> tuple[Any, Any]:
        import ray
        from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool

        from backends.verl.worker import VerlWorker

        n = self.num_workers
        threads = max(devices.threads // n, 1)
        if self.places_gpus:
            pool = placement.ready_pool(self.layout)
        else:
            # A bundle of CPUs per worker: its share of what the trainer reserves, or a token amount while
            # it takes turns with the engines (Ray refuses empty bundles); veRL's default would be 10 each.
            cpus = round(devices.cpus / n, 4) if devices.cpus > 0 else 0.01
            pool = RayResourcePool(process_on_nodes=[n], use_gpu=False, max_colocate_count=cpus)
        env: dict[str, str] = {} if self.use_gpu else cpu.cpu_worker_env()
        worker_cls = RayClassWithInitArgs(
            cls=ray.remote(VerlWorker), configs=self.configs, threads=threads, seed=self.settings.seed
        )
        if not self.places_gpus:
            worker_cls.update_options({"num_cpus": pool.max_colocate_count})
        env["OMP_NUM_THREADS"] = str(threads)
        group = _worker_group_class()(resource_pool=pool, ray_cls_with_init=worker_cls, device_name="cuda" if self.use_gpu else "cpu",
                                         worker_env=env)
        group.init_model()
        return pool, group

    def cpu_seconds(self) -> float:
        """The controller's process and every worker process (separate Ray actors, not its children)."""
        return super().cpu_seconds() + sum(self.workers.cpu_seconds())

    def check_alive(self) -> None:
        """Every worker answers. One that died (killed for memory, say) leaves its ranks' process group
        unable to go on, so the trainer as a whole counts as dead and is started again."""
        import ray

        ray.get([worker.__ray_ready__.remote() for worker in self.workers.workers], timeout=60)

    def close(self) -> None:
        """Stop the workers and free their placement group (a second group would wait for it forever)."""
        import ray

        for worker in getattr(self.workers, "workers", []):
            ray.kill(worker)
        for pg in self._pool.pgs or []:
            ray.util.remove_placement_group(pg)
        self._pool.pgs = None

    # -- TrainerBackend -------------------------------------------------------------------------

    @property
    def global_step(self) -> int:
        return self._step

    def train_step(self, batch: list[Experience]) -> dict[str, float]:
        from verl.utils import tensordict_utils as tu

        started = time.perf_counter()
        batch, penalties, kl_metrics = penalise_before_step(
            self.reward_kl, batch, self.critic is not None, self.reference_logprobs)
        rows = vb.padded(vb.with_advantage(batch), self._rows_multiple())
        critic_metrics: dict[str, float] = {}
        token_advantages: dict[str, torch.Tensor] = {}
        if self.critic is not None:  # before the policy: the old values make the advantages (veRL's order)
            advantages, critic_metrics = self.critic.step(rows, penalties)
            token_advantages = {"advantages": advantages}
        # critic_warmup: the first steps train the critic only; the policy keeps its weights (and its schedule)
        if self.critic is not None and self._step < self.config.trainer.critic.critic_warmup:
            return self._finish(batch, rows, started, {**kl_metrics, **critic_metrics, "critic/warmup": 1.0})
        ref = None
        if self.configs.use_kl_loss or self.whole_ref:  # veRL's KL term, or our whole loss's reference
            ref = self._logprobs(rows, self.workers.compute_ref_log_prob)
        extra: dict[str, torch.Tensor] = dict(token_advantages)
        if self.expert_rows:  # the mix family: which rows are expert rows, their whole-batch counts, the step
            extra["expert_mask"] = torch.tensor([e.expert for e in rows], dtype=torch.bool)
        data = vb.to_tensordict(rows, self.pad_token_id, self.temperature, ref_log_prob=ref, **extra)
        if self.expert_rows:
            tu.assign_non_tensor(data, **{
                STEP: self._step + 1,
                "global_expert_tokens": sum(sum(e.response_mask) for e in batch if e.expert),
                "global_expert_seqs": sum(1 for e in batch if e.expert and any(e.response_mask)),
            })
        tu.assign_non_tensor(
            data,
            calculate_entropy=True,  # the entropy metric, and the term when entropy_coeff is set
            compute_loss=True,
            global_batch_size=vb.sequences_trained(batch),
            mini_batch_size=len(rows),  # one optimizer step per train step
            epochs=1,
            seed=self.settings.seed,
            dataloader_kwargs={"shuffle": False},
        )
        output = self.workers.update_actor(data)
        metrics = vb.our_metrics(tu.get(output, "metrics"))
        return self._finish(batch, rows, started, {**metrics, **kl_metrics, **critic_metrics})

    def _finish(self, batch: list[Experience], rows: list[Experience], started: float,
                metrics: dict[str, float]) -> dict[str, float]:
        """The step counted, and its metrics with the batch's sizes and speed."""
        self._step += 1
        seconds = time.perf_counter() - started
        tokens = sum(len(e.prompt_token_ids) + len(e.response_token_ids) for e in rows)
        return {
            **metrics,
            "train_tokens": float(tokens),
            "train_tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
            "response_length": float(np.mean([len(e.response_token_ids) for e in batch])),
            "skipped_zero_advantage": 0.0,
        }

    def logprobs(self, batch: list[Experience]) -> list[list[float]]:
        return self._response_logprobs(batch, self.workers.compute_log_prob)

    def reference_logprobs(self, batch: list[Experience]) -> list[list[float]]:
        """Logprob of each response token under the reference model (its engine, or with LoRA the actor
        with the adapter off)."""
        return self._response_logprobs(batch, self.workers.compute_ref_log_prob)

    def _response_logprobs(self, batch: list[Experience], compute: Any) -> list[list[float]]:
        """Each experience's response-token logprobs from a worker method (the actor's or the reference's)."""
        rows = vb.padded(vb.with_advantage(batch), self._rows_multiple())
        token_logprobs = self._logprobs(rows, compute)
        return [token_logprobs[i, : len(e.response_token_ids)].tolist() for i, e in enumerate(batch)]

    def publish_weights(self, version: int, folder: Path | None) -> WeightsHandle:
        if folder is None:
            raise ValueError("the veRL trainer publishes weights as a folder of safetensors: give one")
        self.workers.export_weights(str(folder))
        return WeightsHandle(version=version, kind="folder", location=str(folder))

    def push_weights(self, transport: Any, engine_actors: Any, version: int) -> WeightsHandle:
        results = self.workers.push_weights(transport, list(engine_actors), version)
        return results[0]  # rank 0 sent them

    def save_checkpoint(self, path: Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.workers.save_checkpoint(str(path), self._step)
        state = {"format": "verl-fsdp", "global_step": self._step, "world_size": self.num_workers}
        if self.reward_kl is not None:  # the KL penalty's (adaptive) coefficient
            state[STATE_KEY] = self.reward_kl.state_dict()
        (path / STATE_FILE).write_text(json.dumps(state, indent=2))

    def load_checkpoint(self, path: Path) -> None:
        path = Path(path)
        state = json.loads((path / STATE_FILE).read_text())
        if state.get("world_size") != self.num_workers:
            raise ValueError(
                f"{path}: saved by {state.get('world_size')} veRL workers, but this trainer has {self.num_workers}; "
                "resume with the same number of training processes"
            )
        check_folder(path)  # veRL's manager unpickles fully: only files that load weights-only reach it
        if self.critic is not None:
            if not critic_dir(path).is_dir():
                raise FileNotFoundError(f"{critic_dir(path)}: no critic in this checkpoint; it was written by a run "
                                        "without advantage_fn 'ppo'")
            check_folder(critic_dir(path))
        self.workers.load_checkpoint(str(path))
        self._step = int(state["global_step"])
        if self.reward_kl is not None:
            self.reward_kl.load_state_dict(state.get(STATE_KEY))

    # -- internals ------------------------------------------------------------------------------

    def _rows_multiple(self) -> int:
        """Rows a batch must be a multiple of: one share per data-parallel rank, each a whole number of
        micro-batches unless their size is dynamic."""
        return self.dp_size * (1 if self.settings.use_dynamic_bsz else self.settings.micro_batch_size)

    def _logprobs(self, rows: list[Experience], method: Any) -> torch.Tensor:
        from verl.utils import tensordict_utils as tu

        data = vb.to_tensordict(rows, self.pad_token_id, self.temperature)
        tu.assign_non_tensor(data, calculate_entropy=False, compute_loss=False)
        return vb.response_logprobs(method(data), data)


def _gpu_layout(planned: int) -> list[int]:
    """veRL's workers as equal groups on nodes with GPUs free now (backends.verl.placement); GPUs the plan gave the
    trainer that no equal layout can use are named, not waited for."""
    layout = placement.worker_layout(planned, capacity.free_gpus_per_node())
    if sum(layout) < planned:
        logger.warning("the veRL trainer trains on %d of its %d GPU(s) (%s a node): veRL needs an equal number on each "
                       "node, and the nodes have %s free", sum(layout), planned, layout[0], capacity.free_gpus_per_node())
    return layout


def _worker_group_class() -> type:
    from verl.single_controller.ray import RayWorkerGroup

    class WorkerGroup(RayWorkerGroup):
        """veRL's RayWorkerGroup, finding the workers' torch.distributed rendezvous without a CPU.

        veRL probes the address and port with a task asking for a whole CPU inside the workers' placement
        group (single_controller/ray/base.py:_get_master_addr_port), more than the fractional bundles of
        CPU workers taking turns with the engines hold; passing them in does not help (the base class
        resets them, single_controller/base/worker_group.py:148)."""

        def _get_master_addr_port(self, pg, bundle_index=0, master_port_range=None):  # noqa: ANN001, ANN202
            import ray
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
            from verl.single_controller.ray.base import get_master_addr_port

            if self._master_addr is None:
                strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=bundle_index)
                self._master_addr, self._master_port = ray.get(
                    get_master_addr_port.options(num_cpus=0, scheduling_strategy=strategy).remote(
                        master_port_range=master_port_range
                    )
                )

    return WorkerGroup
