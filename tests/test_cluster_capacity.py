"""GPU clusters that this machine does not have, declared to a real Ray (issue 70): Ray nodes that say they
hold 4, 8 or 2 × 2 GPUs (ray.cluster_utils.Cluster: a raylet per node on this machine). Ray hands out GPU ids
it believes in; nothing here touches a device.

- veRL's own worker group is placed on 1×4, 1×8, 2×2 and 2×4 nodes after the engines took theirs: every
  worker gets a rank and a GPU of its own, and veRL's equal-groups assertion holds (an uneven list such as
  [2, 1], which the trainer used to make for gsm8k-qwen on a 4-GPU node, fails it).
- A request no node can meet is refused at once, naming the setting and what the cluster has, instead of
  Ray queueing it forever: the torch trainer on a cluster whose only GPU an engine took, an engine wider than
  any node; a placement that cannot complete ends within its bound.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.errors import ConfigError
from backends.local import capacity
from backends.verl import placement


@pytest.fixture
def fake_gpus(request: pytest.FixtureRequest) -> Iterator[object]:
    """A Ray cluster of nodes declaring `request.param` GPUs each (a tuple, one entry a node), joined."""
    import ray
    from ray.cluster_utils import Cluster

    nodes = request.param
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": max(4, nodes[0]), "num_gpus": nodes[0]})
    for gpus in nodes[1:]:
        cluster.add_node(num_cpus=max(4, gpus), num_gpus=gpus)
    cluster.wait_for_nodes()
    ray.shutdown()  # an earlier module's driver connection in this worker: this test joins its own cluster
    ray.init(address=cluster.address, namespace="rft", log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def _hold(gpus: float, count: int) -> list:
    """Actors holding GPUs as the rollout engines would (each on one node)."""
    import ray

    @ray.remote
    class Engine:
        def ready(self) -> bool:
            return True

    holders = [Engine.options(num_gpus=gpus, num_cpus=0).remote() for _ in range(count)]
    ray.get([h.ready.remote() for h in holders], timeout=60)
    return holders


def test_the_layout_is_equal_groups_on_different_nodes() -> None:
    assert placement.worker_layout(3, [3.0]) == [3]  # gsm8k-qwen on one 4-GPU node (the engine took one)
    assert placement.worker_layout(7, [7.0]) == [7]
    assert placement.worker_layout(6, [4.0, 3.0]) == [3, 3]  # 2×4, an engine on one node
    assert placement.worker_layout(3, [2.0, 1.0]) == [2]  # 2×2: [2, 1] would fail veRL; one GPU left idle
    assert placement.worker_layout(4, [2.0, 2.0]) == [2, 2]
    assert placement.worker_layout(4, [1.0, 1.0, 1.0, 1.0]) == [1, 1, 1, 1]
    with pytest.raises(ConfigError, match="cluster.gpu_per_node"):
        placement.worker_layout(2, [0.0, 0.0])


def test_fits_places_each_request_on_one_node() -> None:
    assert capacity.fits(2, 2, [2.0, 2.0]) and not capacity.fits(2, 1, [1.0, 1.0])
    assert capacity.fits(1, 3, [2.0, 1.0]) and not capacity.fits(1, 4, [2.0, 1.0])


@pytest.mark.slow
@pytest.mark.parametrize(("fake_gpus", "engines"), [((4,), 1), ((8,), 1), ((8,), 2), ((2, 2), 1), ((4, 4), 2)],
                         indirect=["fake_gpus"], ids=["1x4", "1x8", "1x8-2engines", "2x2", "2x4"])
def test_verl_workers_are_placed_after_the_engines(fake_gpus: object, engines: int) -> None:
    import ray
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register
    from verl.single_controller.ray import RayClassWithInitArgs

    from backends.verl.trainer import _worker_group_class

    class Probe(Worker):
        @register(dispatch_mode=Dispatch.ALL_TO_ALL)
        def where(self) -> dict:
            return {"rank": self.rank, "gpus": ray.get_gpu_ids(), "node": ray.get_runtime_context().get_node_id()}

    holders = _hold(1, engines)
    total = int(ray.cluster_resources()["GPU"])
    layout = placement.worker_layout(total - engines, capacity.free_gpus_per_node())
    assert len(set(layout)) == 1  # veRL reads the first entry as every group's size
    pool = placement.ready_pool(layout)  # it raises past placement_timeout_s(): returning is being ready within it
    group = _worker_group_class()(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(Probe)),
                                  device_name="cuda")  # the trainer's veRL worker group
    seen = group.where()
    assert sorted(w["rank"] for w in seen) == list(range(sum(layout)))
    assert len({(w["node"], tuple(w["gpus"])) for w in seen}) == sum(layout)  # a GPU of its own each
    assert len({w["node"] for w in seen}) == len(layout)  # a group a node
    for worker in group.workers:
        ray.kill(worker)
    for holder in holders:
        ray.kill(holder)


@pytest.mark.slow
@pytest.mark.parametrize("fake_gpus", [(4,)], indirect=True)
def test_verl_refuses_groups_of_unequal_size(fake_gpus: object) -> None:
    """Why the layout is equal: veRL's worker group asserts it (single_controller/ray/base.py) before it starts a
    worker. [2, 1] is what the trainer made for gsm8k-qwen (gpu_per_node 2) on a 4-GPU node with one engine."""
    import ray
    from verl.single_controller.base import Worker
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    pool = RayResourcePool(process_on_nodes=[2, 1], use_gpu=True, max_colocate_count=1)
    with pytest.raises(AssertionError):
        RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(Worker)),
                       device_name="cuda")


@pytest.mark.slow
@pytest.mark.timeout(120)  # on the old main it waited for the GPU forever
@pytest.mark.parametrize("fake_gpus", [(1,)], indirect=True)
def test_a_trainer_gpu_the_engines_took_is_refused_not_waited_for(fake_gpus: object) -> None:
    import ray

    from backends.local.policy import ResourcePlan
    from backends.local.trainer_actor import start_trainer_actor
    from deployments import load_recipe

    holders = _hold(1, 1)  # the one engine holds the one GPU (kept: a dropped handle ends the actor)
    plan = ResourcePlan(engine_gpus=1, engine_threads=1, trainer_gpus=1, trainer_cpus=0.0, trainer_threads=1)
    with pytest.raises(ConfigError, match=r"cluster.gpu_per_node: the torch trainer ask\(s\) for 1 × 1 GPU.*0 of 1"):
        start_trainer_actor("capacity-trainer", load_recipe("smoke"), "unused", 1, plan)
    assert ray.get([h.ready.remote() for h in holders])  # the engines go on


@pytest.mark.slow
@pytest.mark.parametrize("fake_gpus", [(1, 1)], indirect=True)
def test_an_engine_wider_than_any_node_is_refused(fake_gpus: object) -> None:
    from backends.local.vllm_engine import EngineSettings, start_engine_actors

    settings = EngineSettings(model_path="unused", max_model_len=64, tensor_parallel_size=2)
    with pytest.raises(ConfigError, match=r"explorer.rollout_model.engine_num: 1 vLLM engine\(s\) ask\(s\) for 1 × 2 GPU"):
        start_engine_actors(settings, ["capacity-rollout-0"], threads=None, gpus=2)


@pytest.mark.slow
@pytest.mark.timeout(120)  # the placement's own bound is 3 s here
@pytest.mark.parametrize("fake_gpus", [(4,)], indirect=True)
def test_a_placement_that_cannot_complete_ends_within_its_bound(fake_gpus: object, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.setenv("RFT_PLACEMENT_TIMEOUT_S", "3")
    holders = _hold(1, 2)  # two GPUs left on the node
    with pytest.raises(TimeoutError, match=r"3 GPUs, one group per node.*RFT_PLACEMENT_TIMEOUT_S.*2 of 4"):
        placement.ready_pool([3])
    assert not [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]  # none left waiting
    assert ray.get([h.ready.remote() for h in holders])


# --- a second node with a disk of its own ------------------------------------------------------------------------

@pytest.fixture
def two_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[object, Path, Path]]:
    """Two Ray nodes; the driver's model cache is its own (RFT_CACHE_DIR), the second node's another, as two machines'
    would be (given to the processes placed there)."""
    import ray
    from ray.cluster_utils import Cluster

    driver_cache, node_cache = tmp_path / "driver-cache", tmp_path / "node2-cache"
    monkeypatch.setenv("RFT_CACHE_DIR", str(driver_cache))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"head": 1}})
    cluster.add_node(num_cpus=2, resources={"node2": 1})
    cluster.wait_for_nodes()
    ray.shutdown()  # an earlier module's driver connection in this worker: this test joins its own cluster
    ray.init(address=cluster.address, namespace="rft", log_to_driver=False)
    try:
        yield cluster, driver_cache, node_cache
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_an_engine_on_another_node_makes_the_embedded_model_there(two_caches: tuple[object, Path, Path]) -> None:
    """The driver converts the embedded model into its own cache and hands the engines that folder; a node
    without it converted the id there, where it used to ask the hub for the driver's path."""
    import ray

    from backends.local.vllm_engine import EngineSettings, VLLMEngine
    from checkpointing.models import origin_id, resolve_model_path

    _, driver_cache, node_cache = two_caches
    model_id = "HuggingFaceTB/SmolLM2-135M-Instruct"
    folder = str(resolve_model_path(model_id))
    assert folder.startswith(str(driver_cache)) and origin_id(folder, model_id) == model_id
    settings = EngineSettings(model_path=folder, model_id=model_id, max_model_len=128, kv_cache_memory_bytes=1 << 27,
                              dtype="float32")
    driver_cache.rename(driver_cache.with_name("driver-cache-elsewhere"))  # not on the other machine's disk
    on_node2 = {"resources": {"node2": 0.01}, "runtime_env": {"env_vars": {"RFT_CACHE_DIR": str(node_cache)}}}
    engine = ray.remote(VLLMEngine).options(num_cpus=1, **on_node2).remote(
        "capacity-node2-rollout", settings.__dict__)
    info = ray.get(engine.info.remote(), timeout=600)
    assert info["serve_dir"] and list(node_cache.rglob("config.json"))  # converted on that node
    ray.get(engine.shutdown.remote(), timeout=60)


@pytest.mark.slow
def test_a_stage_folder_missing_on_a_node_is_named_at_preflight(two_caches: tuple[object, Path, Path], tmp_path: Path,
                                                                 tiny_model_path: str) -> None:
    """A stage's own folder (a warm-up's weights) is never swapped for the base model: missing on a node, it is
    named at pre-flight, node by node."""
    import shutil

    from backends.local import node_checks

    warm = tmp_path / "warm-up"
    shutil.copytree(tiny_model_path, warm)
    node_checks.check_every_node(str(warm), "", "/dev/shm/rft")  # there on both nodes: nothing to say
    shutil.rmtree(warm)
    with pytest.raises(ConfigError, match=r"model.model_path: not every Ray node can serve the model:\n  .*warm-up is "
                                          r"not on node .*\n  .*warm-up is not on node"):
        node_checks.check_every_node(str(warm), "", "/dev/shm/rft")


def test_a_small_dev_shm_is_refused_naming_it(tmp_path: Path) -> None:
    """A container's default /dev/shm (64 MB) cannot hold SmolLM2's weights twice: named before anything starts."""
    import subprocess

    from backends.local import node_checks
    from checkpointing.models import resolve_model_path

    shm = tmp_path / "shm"
    shm.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(shm)], check=True)
    try:
        [problem] = node_checks.check_this_node(str(resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")), "",
                                                str(shm / "rft"))
        assert f"{shm} has 64 MiB free" in problem and "--shm-size" in problem
    finally:
        subprocess.run(["umount", str(shm)], check=True)


@pytest.mark.slow
@pytest.mark.parametrize(("fake_gpus", "gpus", "trainer"), [((8,), 8, 7), ((4,), 4, 3), ((4, 4), 4, 7)],
                         indirect=["fake_gpus"], ids=["1x8", "1x4", "2x4"])
def test_gsm8k_qwens_plan_is_accepted_on_the_cluster(fake_gpus: object, gpus: int, trainer: int) -> None:
    """The pre-flight of the GPU recipe against a cluster declaring its GPUs: one engine, veRL on the rest."""
    from backends.local.policy import LocalPolicy
    from deployments import load_recipe

    nodes = len(fake_gpus.list_all_nodes())
    config = load_recipe("gsm8k-qwen").with_overrides({"cluster.gpu_per_node": gpus, "cluster.node_num": nodes,
                                                       "cluster.ray_address": fake_gpus.address})
    [line] = LocalPolicy(config).check_requirements()
    assert line.startswith("1 vLLM engine(s), 1 GPU(s)") and f"trainer verl with {trainer} GPU(s)" in line
