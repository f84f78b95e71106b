"""Mode colocate on one GPU (issue 70): the engine and the torch trainer share it, taking turns. Here the GPU is one a
Ray node declares (RFT_PLACEHOLDER_GPUS=1: every device stays CPU), so what runs is the plan (half the GPU each, so
Ray puts both on it), the turns (the engine put to sleep before every trainer computation, woken by its next call,
whoever makes it), and new weights served after a sync. vLLM's CPU build has no sleep mode: the engine counts its
turns there, where on a GPU `vllm.LLM.sleep` gives the memory back (backends/local/vllm_engine.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.rollout import SamplingSettings
from buffer.experience import Experience
from deployments import load_recipe

pytestmark = pytest.mark.slow


def _batch() -> list[Experience]:
    return [Experience(eid=f"s1/{i}", task_id=f"t{i // 2}", group_id=f"g{i // 2}", prompt_token_ids=[1, 9690, 198, 33 + i],
                       response_token_ids=[504 + i, 314, 2], logprobs=[-1.0] * 3, reward=adv, advantage=adv)
            for i, adv in enumerate([1.0, -1.0, 0.5, -0.5])]


@pytest.fixture
def one_gpu_policy(tmp_path: Path, tiny_model_path: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    import ray
    from ray.cluster_utils import Cluster

    from backends.policy import policy_for
    from checkpointing.models import resolve_model_path

    monkeypatch.setenv("RFT_PLACEHOLDER_GPUS", "1")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 1})
    config = load_recipe("smoke").with_overrides({
        "name": "colocate-one-gpu", "checkpoint_root_dir": str(tmp_path), "model.model_path": tiny_model_path,
        "mode": "colocate", "cluster.gpu_per_node": 1, "cluster.node_num": 1, "cluster.ray_address": cluster.address,
        "synchronizer.sync_method": "memory",
    })
    policy = policy_for(config)
    ray.shutdown()  # an earlier module's driver connection in this worker: the policy joins this cluster
    policy.connect()
    try:
        model_dir = str(resolve_model_path(config.model.model_path))
        policy.check_requirements()
        policy.start_engines(model_dir)
        policy.start_trainer(model_dir, total_steps=4)
        yield policy
    finally:
        policy.release()
        ray.shutdown()
        cluster.shutdown()


def test_the_engine_sleeps_while_the_trainer_steps_on_the_shared_gpu(one_gpu_policy: object) -> None:
    import ray

    policy = one_gpu_policy
    plan = policy.plan()
    assert plan.shares_gpu and plan.engine_gpus == plan.trainer_actor_gpus == 0.5  # both on the one GPU
    [engine] = policy.engines()
    assert ray.cluster_resources()["GPU"] == 1.0 and ray.available_resources().get("GPU", 0.0) == 0.0
    assert (engine.info()["sleeps"], engine.info()["asleep"]) == (0, False)

    policy.trainer.train_step(_batch())
    assert (engine.info()["sleeps"], engine.info()["asleep"]) == (1, True)  # before the step, not after
    policy.sync(1)  # the new weights go in: the engine wakes for them
    info = engine.info()
    assert (info["wakes"], info["asleep"]) == (1, False) and engine.model_version() == 1

    policy.trainer.train_step(_batch())
    [[sample]] = engine.generate([[1, 9690, 198, 33]], SamplingSettings(n=1, temperature=0.0, max_tokens=4))
    assert sample.response_token_ids  # a sampling call wakes it too
    assert (engine.info()["sleeps"], engine.info()["wakes"]) == (2, 2)
    policy._engines_sleep()  # a log-prob pass, then the step: asleep twice, never woken in between
    policy._engines_sleep()
    assert (engine.info()["sleeps"], engine.info()["wakes"], engine.info()["asleep"]) == (4, 2, True)
