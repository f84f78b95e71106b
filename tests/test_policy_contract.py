"""The backend contract against the local policy (vLLM CPU engines + the torch trainer on Ray, weights
pushed into the engines over gloo), two
stage flows of one experiment running at once under a parent flow, and a crashed engine revived with
the weights it served. One module-scoped policy serves every test (each engine and trainer start costs).
The veRL trainer runs the same contract in tests/test_verl_trainer.py, on the policy that module starts
anyway (two FSDP ranks, weights pushed over gloo): a second veRL start here would cost minutes and add nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext

from backends.local.policy import LocalPolicy, plan_resources
from backends.policy import Policy, policy_for
from checkpointing.models import resolve_model_path
from deployments import load_recipe
from schemas import ExperimentConfig
from tests import policy_contract
from tests.tiny_model import CONTRACT_LR, CONTRACT_STEPS
from workflows.render import ChatRenderer, renderer_for


def test_the_policy_plans_resources_from_the_config() -> None:
    config = load_recipe("smoke")
    taking_turns = plan_resources(config, {"GPU": 0.0}, cores=8)
    assert (taking_turns.engine_threads, taking_turns.trainer_threads, taking_turns.trainer_cpus) == (8, 8, 0.0)
    assert taking_turns.trainer_nice == 0
    overlapping = plan_resources(config.with_overrides({"synchronizer.sync_offset": 1}), {"GPU": 0.0}, cores=8)
    # overlapped, the engines keep every core and the trainer takes half (benchmarks/grpo_step.py)
    assert (overlapping.engine_threads, overlapping.trainer_threads, overlapping.trainer_cpus) == (8, 4, 1.0)
    assert overlapping.trainer_nice == 10  # ... at a lower CPU priority than sampling
    two_engines = plan_resources(config.with_overrides({"explorer.rollout_model.engine_num": 2}), {"GPU": 0.0}, cores=8)
    assert two_engines.engine_threads == 4
    on_gpus = plan_resources(config, {"GPU": 2.0}, cores=8)
    assert (on_gpus.engine_gpus, on_gpus.trainer_gpus) == (1, 1)
    overlapping_on_gpus = plan_resources(config.with_overrides({"synchronizer.sync_offset": 1}), {"GPU": 2.0}, cores=8)
    assert overlapping_on_gpus.trainer_nice == 0  # each side has its own device
    # veRL's variant declares that its worker processes hold the devices: its actor asks Ray for none
    verl_on_gpus = plan_resources(config.with_overrides({"trainer.trainer_type": "verl"}), {"GPU": 4.0}, cores=8)
    assert (verl_on_gpus.trainer_gpus, verl_on_gpus.trainer_actor_gpus) == (3, 0)
    assert (on_gpus.trainer_gpus, on_gpus.trainer_actor_gpus) == (1, 1)
    assert isinstance(policy_for(config), LocalPolicy)


@pytest.fixture(scope="module")
def local(module_tmp_path: Path, tiny_model_path: str) -> Iterator[tuple[ExperimentConfig, Policy]]:
    import ray

    config = load_recipe("smoke").with_overrides({
        "name": "contract",
        "checkpoint_root_dir": str(module_tmp_path),
        "cluster.ray_address": "local",
        # the tiny model: the checks are of the policy's plumbing, not of learning
        "model.model_path": tiny_model_path,
        "algorithm.optimizer.lr": CONTRACT_LR,
        "algorithm.optimizer.weight_decay": 0.0,
        # the trainer pushes its tensors into the running engine (vLLM's weight-transfer API, over gloo on
        # CPU), as on GPUs; the recipes' folder route (memory) runs in every flow test
        "synchronizer.sync_method": "nccl",
        "synchronizer.sync_timeout": 300,
    })
    policy = policy_for(config)
    policy.connect()
    model_dir = str(resolve_model_path(config.model.model_path))
    try:
        policy.start_engines(model_dir)
        policy.start_trainer(model_dir, total_steps=100)
        yield config, policy
    finally:
        policy.release()
        ray.shutdown()


@pytest.fixture(scope="module")
def renderer() -> ChatRenderer:
    return renderer_for(load_recipe("smoke").model.model_path)


@pytest.mark.slow
def test_contract_train_step_changes_logprobs(local: tuple[ExperimentConfig, Policy], renderer: ChatRenderer) -> None:
    policy_contract.check_train_step_changes_logprobs(local[1], renderer)


@pytest.mark.slow
def test_contract_checkpoint_round_trip(local: tuple[ExperimentConfig, Policy], renderer: ChatRenderer, tmp_path: Path) -> None:
    policy_contract.check_checkpoint_round_trip(local[1], renderer, tmp_path / "actor")


@pytest.mark.slow
def test_contract_published_weights_change_samples(local: tuple[ExperimentConfig, Policy], renderer: ChatRenderer) -> None:
    policy_contract.check_published_weights_change_samples(local[1], renderer, max_steps=CONTRACT_STEPS)


@pytest.mark.slow
def test_two_stage_flows_run_at_once_under_one_parent(local: tuple[ExperimentConfig, Policy]) -> None:
    """Explore of step 2 while step 1 trains: both are child flow runs of the parent, and both are
    running at the same moment (each waits, once running, until the other is running too)."""
    import asyncio
    import threading

    from flows.concurrent import run_concurrently
    from flows.explore import explore
    from flows.stage import stage_flows_without_heartbeats
    from flows.train import train

    config = local[0]
    both_running = threading.Barrier(2)
    met: list[str] = []

    def meet(flow_: object, run: object, state: object) -> None:
        both_running.wait(timeout=120)  # raises BrokenBarrierError when the other never runs meanwhile
        met.append(run.name)

    @flow(name="two-stages")
    def parent() -> tuple[str, list[dict]]:
        with stage_flows_without_heartbeats():
            explore(config, 1)
            results = run_concurrently(
                lambda: train.with_options(on_running=[meet])(config, 1),
                lambda: explore.with_options(on_running=[meet])(config, 2),
            )
        return str(FlowRunContext.get().flow_run.id), results

    parent_id, (trained, explored) = parent()
    assert "train/loss" in trained and explored["explore/experiences"] == 4
    assert len(met) == 2, "the two stage flows never ran at the same time"

    async def children() -> list:
        async with get_client() as client:
            kids = []
            for run in await client.read_flow_runs():
                if run.parent_task_run_id is not None:
                    task_run = await client.read_task_run(run.parent_task_run_id)
                    if str(task_run.flow_run_id) == parent_id:
                        kids.append(run)
            return kids

    kids = asyncio.run(children())
    assert sorted(k.name for k in kids) == sorted([*met, next(k.name for k in kids if k.name not in met)])
    assert len(kids) == 3 and all(k.state.is_completed() for k in kids)


@pytest.mark.slow
def test_dead_engine_is_revived_with_the_current_weights(local: tuple[ExperimentConfig, Policy], renderer: ChatRenderer) -> None:
    """A crashed rollout engine is started again, serving the weights the engines served (the last loaded
    version), so a retried explore task finds a working engine instead of repeating the crash. (Runs
    last: it restarts the module's engine; it trains and syncs a step of its own first.)"""
    import ray

    from backends.local.engine_client import EngineClient
    from backends.rollout import SamplingSettings
    from tasks.setup import revive_engines

    config, policy = local
    policy.trainer.train_step([policy_contract.on_policy(policy, policy_contract.target_experience(renderer, eid="revival"))])
    version = policy.trainer.global_step
    policy.sync(version)
    greedy, prompt = SamplingSettings(n=1, temperature=0.0, max_tokens=16), renderer.render(policy_contract.QUESTION)
    (first,) = policy.engines()
    [[served]] = first.generate([prompt], greedy)
    ray.kill(first.actor, no_restart=True)  # asynchronous: a call sent at once may still be answered
    deadline = time.monotonic() + 60
    while first.alive(timeout_s=5) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not first.alive(timeout_s=5)
    assert policy.cpu_seconds("explore") == 0.0  # a dead engine counts 0 instead of failing the explore task

    @flow
    def scenario() -> tuple[list[str], list[str]]:  # revive_engines logs and counts restarts in a run
        return revive_engines(config), revive_engines(config)  # the second: all alive, nothing to do

    revived, again = scenario()
    assert revived == [first.name] and again == []
    engine = EngineClient(first.name)
    assert engine.alive() and engine.model_version() == version  # the version served before the crash
    assert policy.cpu_seconds("explore") > 0.0  # counted again from the revived engine's start
    [[after]] = engine.generate([prompt], greedy)
    assert after.response_token_ids == served.response_token_ids  # the same weights: the same greedy answer
