"""The local policy: vLLM engines and a trainer actor (torch or veRL), named Ray actors of the experiment.

    {experiment_id}-rollout-{i}   a vLLM engine (backends.local.vllm_engine)
    {experiment_id}-trainer       the trainer (backends.local.trainer_actor, any TrainerBackend)
    {experiment_id}-aux{j}-{i}    a vLLM engine of auxiliary model j (explorer.auxiliary_models): never synced

Resources are decided here, from the config and the cluster: GPUs per engine and for the trainer, and
on CPU how the cores are shared — all of them to each side when explorer and trainer take turns, a
share each when they overlap (the schedule says which: backends/schedule.py).
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ray.exceptions import RayError

from backends.errors import ConfigError
from backends.local import capacity, node_checks, ray_cluster, trainer_actor, vllm_engine
from backends.local.engine_client import EngineClient
from backends.local.weight_sync import SHM_ROOT, WeightTransport, make_transport, remove_shared_memory, shm_dir
from backends.policy import Policy
from backends.schedule import Schedule
from backends.weights import WeightsHandle
from checkpointing import layout
from checkpointing.models import origin_id, resolve_model_path
from schemas.rules import MEMORY_SYNC_ON_GPUS

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResourcePlan:
    """What each actor asks Ray for, and the CPU threads it computes with."""

    engine_gpus: float  # per engine (tensor_parallel_size), 0 on CPU; SHARED_GPU of the one GPU it shares
    engine_threads: int  # OMP threads of each CPU engine
    trainer_gpus: int  # GPUs the trainer trains on: torch 1; veRL the cluster's GPUs minus the engines'
    trainer_cpus: float  # Ray CPUs the trainer reserves: 0 while it takes turns with the engines
    trainer_threads: int  # CPU threads of the trainer's computation, in all
    trainer_nice: int = 0  # the trainer's CPU priority below the engines' (Unix nice), overlapped on CPU
    trainer_in_workers: bool = False  # veRL: the trainer actor only drives worker processes that hold the devices
    spread: bool = False  # engines on as many nodes as can take them (a cluster of several nodes)
    shares_gpu: bool = False  # mode colocate on a GPU: one engine and the trainer on one GPU, taking turns

    @property
    def trainer_actor_gpus(self) -> float:
        """What the trainer actor itself asks Ray for (none when its workers hold the devices)."""
        if self.shares_gpu:
            return SHARED_GPU
        return 0 if self.trainer_in_workers else self.trainer_gpus

    @property
    def trainer_actor_cpus(self) -> float:
        return 0.0 if self.trainer_in_workers else self.trainer_cpus


def rollout_gpus(config) -> int:  # noqa: ANN001
    """GPUs the vLLM engines take (engine_num × tensor_parallel_size)."""
    rollout = config.explorer.rollout_model
    return rollout.engine_num * rollout.tensor_parallel_size


ENGINE_SLEEP_TIMEOUT_S = 300.0  # offloading a large model's weights to host RAM takes seconds to a minute

# Mode colocate on a GPU: what the engine and the trainer each ask Ray for, so that both land on the one GPU (vLLM's
# memory share is explorer.rollout_model.gpu_memory_utilization; the engine sleeps while the trainer steps).
SHARED_GPU = 0.5

# Overlapped on CPU the trainer runs at a lower priority, in the gaps sampling leaves: measured on 2 cores
# (benchmarks/grpo_step.py, same run) 12.0 s per step at nice 10 against 13.1 s at nice 0.
OVERLAPPED_TRAINER_NICE = 10


def plan_resources(config, cluster: dict[str, float], cores: int | None = None, nodes: int = 1) -> ResourcePlan:  # noqa: ANN001
    """Devices and threads of the engines and the trainer, from the config and the cluster's totals."""
    rollout = config.explorer.rollout_model
    cores = cores or os.cpu_count() or 1
    gpus = int(cluster.get("GPU", 0))
    schedule = Schedule.of(config)
    overlap = schedule.overlapped  # e.g. explore of step N+1 runs while step N trains
    engine_threads = max(cores // rollout.engine_num, 1)
    # Overlapped, sampling is the long side (~12 s of a step on 2 cores against ~3 s of training): the
    # engines keep every core and the trainer's half-share is oversubscribed for its few seconds, at a
    # lower priority (measured: 12.0 s per step, against 15.3 s with the cores split between the two).
    trainer_threads = max(cores // 2, 1) if overlap else cores
    in_workers = config.trainer.DEVICES_IN_WORKERS
    if not gpus:
        trainer_gpus = 0
    elif in_workers:  # trainer devices = total - rollout devices
        trainer_gpus = gpus - (rollout_gpus(config) if schedule.explores else 0)
    else:
        trainer_gpus = 1
    shares = bool(gpus) and schedule.shares_devices and not in_workers  # validation: one engine of one GPU
    return ResourcePlan(
        engine_gpus=SHARED_GPU if shares else rollout.tensor_parallel_size if gpus else 0,
        engine_threads=engine_threads,
        trainer_gpus=trainer_gpus,
        trainer_cpus=1.0 if overlap and not gpus else 0.0,
        trainer_threads=trainer_threads,
        trainer_nice=OVERLAPPED_TRAINER_NICE if overlap and not gpus else 0,
        trainer_in_workers=in_workers,
        spread=nodes > 1,
        shares_gpu=shares,
    )


class LocalPolicy(Policy):
    """vLLM engines + a trainer actor on the Ray cluster of `cluster.ray_address`."""

    @property
    def engine_names(self) -> list[str]:
        return [f"{self.experiment}-rollout-{i}" for i in range(self.config.explorer.rollout_model.engine_num)]

    def auxiliary_names(self, index: int) -> list[str]:
        aux = self.config.explorer.auxiliary_models[index]
        return [f"{self.experiment}-aux{index}-{i}" for i in range(aux.engine_num)]

    @property
    def _all_auxiliary_names(self) -> list[str]:
        return [n for j in range(len(self.config.explorer.auxiliary_models)) for n in self.auxiliary_names(j)]

    @property
    def trainer_name(self) -> str:
        return f"{self.experiment}-trainer"

    # -- bring up ------------------------------------------------------------------------------

    def connect(self) -> dict[str, float]:
        return ray_cluster.connect(self.config.cluster.ray_address)

    def preflight(self) -> list[str]:
        return [ray_cluster.probe(self.config.cluster.ray_address)]

    def check_requirements(self) -> list[str]:
        config = self.config
        if ray_cluster.resolve(config.cluster.ray_address).probe:  # a running cluster: join it to count its GPUs
            self.connect()
        gpus = ray_cluster.cluster_gpus()  # of this machine, for a local cluster not started yet
        wanted = (config.cluster.gpu_per_node or 0) * (config.cluster.node_num or 1)
        if wanted > 0 and gpus == 0:
            raise ConfigError(
                "cluster.gpu_per_node",
                f"{config.project}/{config.name} needs GPUs (cluster.gpu_per_node={config.cluster.gpu_per_node}, "
                f"{wanted} in all), but the Ray cluster ({config.cluster.ray_address}) has none. Run it from a worker "
                "of the rft-gpu work pool on a GPU machine, or run the CPU recipe `gsm8k`.",
            )
        nodes = ray_cluster.alive_nodes() if ray_cluster.is_connected() else 1  # a local cluster: this machine
        if config.cluster.node_num is not None and nodes < config.cluster.node_num:
            raise ConfigError(
                "cluster.node_num",
                f"{config.project}/{config.name}: cluster.node_num is {config.cluster.node_num}, but the Ray cluster "
                f"({config.cluster.ray_address}) has {nodes} node(s) alive",
            )
        self._transport()  # an impossible sync method fails here, before anything starts
        from backends import registry

        try:
            registry.trainer_class(config.trainer.trainer_type)  # an unbuilt trainer fails here too
        except NotImplementedError as err:
            raise ConfigError("trainer.trainer_type", str(err)) from None
        plan = self.plan()
        if gpus and plan.trainer_gpus < 1:
            raise ConfigError(
                "explorer.rollout_model.engine_num",
                f"{config.project}/{config.name}: the rollout engines take {rollout_gpus(config)} of the cluster's {gpus} "
                "GPU(s) and leave none for the veRL trainer; lower explorer.rollout_model.engine_num or "
                "tensor_parallel_size, or add GPUs"
            )
        if gpus and capacity.gpus_compute() and not plan.shares_gpu and Schedule.of(config).method == "memory":
            raise ConfigError("synchronizer.sync_method",
                              MEMORY_SYNC_ON_GPUS.format(where=f"the Ray cluster has {gpus} GPU(s) and"))
        if gpus and ray_cluster.is_connected():  # each engine on one node, the torch trainer's GPU beside them
            per_node = capacity.total_gpus_per_node()
            rollout = config.explorer.rollout_model
            if not capacity.fits(plan.engine_gpus, rollout.engine_num, per_node):
                raise ConfigError("explorer.rollout_model.tensor_parallel_size", f"{rollout.engine_num} engine(s) of "
                                  f"{plan.engine_gpus} GPU(s) each do not fit the Ray cluster's {capacity.describe(per_node, per_node)}")
            engines = rollout_gpus(config) if Schedule.of(config).explores and not plan.shares_gpu else 0
            if plan.trainer_actor_gpus and not capacity.fits(1, math.ceil(engines + plan.trainer_actor_gpus), per_node):
                raise ConfigError("explorer.rollout_model.engine_num", f"the engines' {engines} GPU(s) and the "
                                  f"{config.trainer.trainer_type} trainer's {plan.trainer_actor_gpus} do not fit the Ray "
                                  f"cluster's {sum(per_node):g}")
        self._check_nodes()
        never = config.budget.max_gpu_hours is not None and not gpus  # validation sees only cluster.gpu_per_node 0
        return [
            f"{len(self.engine_names)} vLLM engine(s), {plan.engine_gpus} GPU(s) and {plan.engine_threads} CPU "
            f"thread(s) each; trainer {config.trainer.trainer_type} with {plan.trainer_gpus} GPU(s), "
            f"{plan.trainer_threads} thread(s)" + ("; engine and trainer share one GPU, taking turns" if plan.shares_gpu else "")
            + ("; no GPUs: budget.max_gpu_hours never stops this run" if never else "")
        ]

    def _check_nodes(self) -> None:
        """The model and /dev/shm on every node (backends.local.node_checks); a folder missing on this machine too
        is left to the pre-flight's own check, which names it."""
        model_id = self.config.model.model_path
        try:
            model_dir = resolve_model_path(model_id)
        except FileNotFoundError:
            return
        if model_dir.is_dir():  # a hub id: each engine downloads it
            node_checks.check_every_node(str(model_dir), origin_id(str(model_dir), model_id), str(SHM_ROOT))

    def plan(self) -> ResourcePlan:
        nodes = ray_cluster.alive_nodes() if ray_cluster.is_connected() else 1
        return plan_resources(self.config, {"GPU": float(ray_cluster.cluster_gpus())}, nodes=nodes)

    def start_engines(self, model_dir: str) -> list[str]:
        plan = self.plan()
        settings = self._in_shm(vllm_engine.EngineSettings.from_config(self.config, model_dir))
        vllm_engine.start_engine_actors(settings, self.engine_names, plan.engine_threads, plan.engine_gpus, plan.spread)
        for j in range(len(self.config.explorer.auxiliary_models)):
            self._start_auxiliary(j, plan)
        return self.engine_names + self._all_auxiliary_names

    def _start_auxiliary(self, index: int, plan: ResourcePlan, names: list[str] | None = None) -> None:
        """Auxiliary model `index`'s engines; on CPU each computes with every core, like a rollout engine (a
        teacher scores after the sampling, not beside it)."""
        aux = self.config.explorer.auxiliary_models[index]
        settings = self._in_shm(vllm_engine.EngineSettings.for_auxiliary(self.config, index))
        vllm_engine.start_engine_actors(settings, names or self.auxiliary_names(index), plan.engine_threads,
                                        aux.tensor_parallel_size if plan.engine_gpus else 0, plan.spread)

    def start_trainer(self, model_dir: str, total_steps: int) -> str:
        plan = self.plan()
        trainer_actor.start_trainer_actor(self.trainer_name, self.config, model_dir, total_steps, plan)
        return self.trainer_name

    # -- use -----------------------------------------------------------------------------------

    @property
    def trainer(self) -> trainer_actor.TrainerClient:
        shares = Schedule.of(self.config).shares_devices  # mode colocate: the engines sleep while the trainer computes
        return trainer_actor.TrainerClient(self.trainer_name, before_compute=self._engines_sleep if shares else None)

    def _engines_sleep(self) -> None:
        """Every engine gives its device back until its next call (vLLM's sleep mode; on CPU only a turn counted)."""
        import ray

        ray.get([engine.actor.sleep.remote() for engine in self.engines()], timeout=ENGINE_SLEEP_TIMEOUT_S)

    def engines(self) -> list[EngineClient]:
        return [EngineClient(name) for name in self.engine_names]

    def auxiliary_engines(self, index: int) -> list[EngineClient]:
        return [EngineClient(name) for name in self.auxiliary_names(index)]

    def cpu_seconds(self, side: str) -> float:
        if side != "explore":
            return super().cpu_seconds(side)
        return sum(self._engine_cpu_seconds(name) for name in self.engine_names + self._all_auxiliary_names)

    @staticmethod
    def _engine_cpu_seconds(name: str) -> float:
        try:
            return EngineClient(name).cpu_seconds()
        except (LookupError, RayError):  # a dead engine counts 0: the rollouts revive it (tasks/rollouts.py)
            return 0.0

    def gpus(self, side: str) -> int:
        plan = self.plan()
        return plan.engine_gpus * len(self.engine_names) if side == "explore" else plan.trainer_gpus

    def publish(self, version: int) -> WeightsHandle:
        transport = self._transport()
        if transport.pushes_tensors:  # the tensors go straight into the engines when they load
            return WeightsHandle(version=version, kind="pushed", location=transport.sync_method)
        folder = transport.export_dir(self.config.experiment_dir.resolve(), self.experiment, version)
        return self.trainer.publish_weights(version, folder)

    def load(self, weights: WeightsHandle) -> None:
        self._load_into(self.engines(), weights)
        self._serving.parent.mkdir(parents=True, exist_ok=True)
        self._serving.write_text(json.dumps(asdict(weights)))  # what a revived engine loads
        self._transport().prune(self.config.experiment_dir.resolve(), self.experiment, keep_from=weights.version)

    def revive(self) -> list[str]:
        ray_cluster.check_cluster_alive()  # a lost cluster is named, not revived into
        dead_aux = {j: [n for n in self.auxiliary_names(j) if not self._alive(n)]
                    for j in range(len(self.config.explorer.auxiliary_models))}
        for j, names in dead_aux.items():
            if names:
                logger.warning("auxiliary engines %s died: starting them again", ", ".join(names))
                for name in names:
                    vllm_engine.stop_engine_actor(name, self._shm_dir)
                self._start_auxiliary(j, self.plan(), names)
        dead = [name for name in self.engine_names if not self._alive(name)]
        if not dead:
            return [n for names in dead_aux.values() for n in names]
        logger.warning("rollout engines %s died: starting them again", ", ".join(dead))
        for name in dead:  # a stuck one (it did not answer) is stopped first; a dead one is a no-op
            vllm_engine.stop_engine_actor(name, self._shm_dir)
        plan = self.plan()
        settings = self._in_shm(vllm_engine.EngineSettings.from_config(self.config))
        vllm_engine.start_engine_actors(settings, self.engine_names, plan.engine_threads, plan.engine_gpus, plan.spread)
        if self._serving.exists():  # the revived engines serve what the others serve
            self._load_into([EngineClient(name) for name in dead], WeightsHandle(**json.loads(self._serving.read_text())))
        return dead

    def timeline(self, path: str) -> str | None:
        if not ray_cluster.is_connected():
            return None
        ray_cluster.dump_timeline(path)
        return path

    def revive_trainer(self, model_dir: str, total_steps: int) -> bool:
        ray_cluster.check_cluster_alive()
        if self._trainer_alive():
            return False
        logger.warning("trainer %s died: starting it again", self.trainer_name)
        trainer_actor.stop_trainer_actor(self.trainer_name)
        self.start_trainer(model_dir, total_steps)
        return True

    def release(self, engines: bool = True, trainer: bool = True) -> None:
        if ray_cluster.is_connected() and ray_cluster.answers():  # a lost cluster took its actors along
            for prefix in (f"{self.experiment}-rollout-", f"{self.experiment}-aux") if engines else ():
                for name in ray_cluster.actor_names(prefix):
                    vllm_engine.stop_engine_actor(name, self._shm_dir)
            if trainer:
                trainer_actor.stop_trainer_actor(self.trainer_name)
        # the weights are in the checkpoints; RAM is not kept for them
        remove_shared_memory(self.config.experiment_dir, self.experiment, engines=engines, staging=trainer)

    # -- internals -----------------------------------------------------------------------------

    @property
    def _shm_dir(self) -> Path:
        return shm_dir(self.config.experiment_dir, self.experiment)

    def _in_shm(self, settings: vllm_engine.EngineSettings) -> vllm_engine.EngineSettings:
        """The engines serve from the experiment's own RAM-backed folder (weight_sync.shm_dir)."""
        settings.shm_dir = str(self._shm_dir)
        return settings

    @property
    def _serving(self) -> Path:
        return layout.sync_dir(self.config.experiment_dir.resolve()) / layout.SERVING

    def _transport(self) -> WeightTransport:
        rollout, schedule = self.config.explorer.rollout_model, Schedule.of(self.config)
        return make_transport(schedule.method, ray_cluster.cluster_gpus() > 0 and capacity.gpus_compute(), rollout.tensor_parallel_size,
                              timeout_s=schedule.timeout_s)

    def _load_into(self, engines: list[EngineClient], weights: WeightsHandle) -> None:
        transport = self._transport()
        if weights.kind == "pushed":  # the trainer streams the tensors in, the engines stamp the version
            dead = [e.name for e in engines if not e.alive(timeout_s=min(Schedule.of(self.config).timeout_s, 60))]
            if dead:  # named here, before the trainer opens a group the dead could never join
                raise RuntimeError(f"cannot push weights version {weights.version}: rollout engine(s) "
                                   f"{', '.join(dead)} do not answer; a retry revives them")
            weights = self.trainer.push_weights(transport, [e.actor for e in engines], weights.version)
        transport.send(engines, weights)

    def _alive(self, name: str) -> bool:
        try:
            return EngineClient(name).alive()
        except LookupError:
            return False

    def _trainer_alive(self) -> bool:
        try:
            self.trainer.ping(timeout_s=60)
            return True
        except (LookupError, RayError):
            return False
