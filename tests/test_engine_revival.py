"""A crashed rollout engine is started again, serving the weights the engines served (the last loaded
version), so a retried explore task finds a working engine instead of repeating the crash."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray
from prefect import flow

from backends.local.engine_client import EngineClient
from backends.policy import policy_for
from buffer.experience import Experience
from deployments import load_recipe
from tasks.setup import connect, prepare_model, release, revive_engines, start_rollout_engines, start_trainer

pytestmark = pytest.mark.slow


def test_dead_engine_is_revived_with_the_current_weights(tmp_path: Path) -> None:
    config = load_recipe("smoke").with_overrides(
        {"checkpoint_root_dir": str(tmp_path), "cluster.ray_address": "local", "name": "revival"}
    )
    policy = policy_for(config)

    @flow
    def scenario() -> tuple[list[str], int, int]:
        connect(config)
        model_dir = prepare_model(config)
        (name,) = start_rollout_engines(config, model_dir)
        start_trainer(config, model_dir, 2)
        step = Experience(
            eid="e0", task_id="t", group_id="g", prompt_token_ids=[1, 2, 3], response_token_ids=[4, 5],
            logprobs=[-1.0, -1.0], reward=1.0, advantage=1.0,
        )
        policy.trainer.train_step([step])
        policy.sync(1)
        first = EngineClient(name)
        ray.kill(first.actor, no_restart=True)
        assert not first.alive()
        revived = revive_engines(config)
        version = EngineClient(name).model_version()
        again = revive_engines(config)  # all alive: nothing to do
        return revived + again, version, len(again)

    try:
        revived, version, second = scenario()
    finally:
        release(config)
        ray.shutdown()
    assert revived == [f"{policy.experiment}-rollout-0"]
    assert version == 1  # the version served before the crash
    assert second == 0
