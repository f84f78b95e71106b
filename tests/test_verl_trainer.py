"""The veRL trainer (FSDP2 over gloo, two worker processes on CPU) behind the local policy: the trainer
part of the backend contract, weights published to the vLLM engine, its checkpoint in veRL's layout
resumed by a fresh trainer (a retried run), and converted to a Hugging Face folder.

One module-scoped policy (one vLLM engine, one veRL trainer) serves every test: the suite's budget.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.models import resolve_model_path
from backends.policy import Policy, policy_for
from deployments import load_recipe
from schemas import ExperimentConfig
from tests import policy_contract
from workflows.render import ChatRenderer, renderer_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def verl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ExperimentConfig, Policy, str]]:
    import ray

    config = load_recipe("smoke").with_overrides({
        "name": "verl-contract",
        "checkpoint_root_dir": str(tmp_path_factory.mktemp("verl")),
        "cluster.ray_address": "local",
        "trainer.trainer_type": "verl",
        "trainer.cpu_workers": 2,  # two FSDP ranks: sharded weights, gathers, a two-rank checkpoint
        "trainer.gradient_checkpointing": False,
        "algorithm.optimizer.lr": 1e-4,
        "algorithm.optimizer.weight_decay": 0.0,
    })
    policy = policy_for(config)
    policy.connect()
    model_dir = str(resolve_model_path(config.model.model_path))
    try:
        policy.check_requirements()
        policy.start_engines(model_dir)
        policy.start_trainer(model_dir, total_steps=100)
        yield config, policy, model_dir
    finally:
        policy.release()
        ray.shutdown()


@pytest.fixture(scope="module")
def renderer() -> ChatRenderer:
    return renderer_for(load_recipe("smoke").model.model_path)


@pytest.fixture(scope="module")
def checkpoint(verl: tuple[ExperimentConfig, Policy, str], renderer: ChatRenderer, tmp_path_factory) -> Path:
    """The contract's round trip; its checkpoint is what the later tests resume and convert."""
    step_dir = tmp_path_factory.mktemp("ckpt") / "global_step_1"
    policy_contract.check_checkpoint_round_trip(verl[1], renderer, step_dir / "actor")
    return step_dir


def test_contract_train_step_changes_logprobs(verl, renderer: ChatRenderer) -> None:
    policy_contract.check_train_step_changes_logprobs(verl[1], renderer)


def test_contract_checkpoint_round_trip_in_verl_layout(checkpoint: Path) -> None:
    actor = checkpoint / "actor"
    names = {p.name for p in actor.iterdir()}
    for rank in (0, 1):
        assert {f"model_world_size_2_rank_{rank}.pt", f"optim_world_size_2_rank_{rank}.pt"} <= names
    assert json.loads((actor / "fsdp_config.json").read_text())["world_size"] == 2
    assert not (actor / "huggingface" / "model.safetensors").exists()  # convert's job, not the trainer's


def test_published_weights_reach_the_engine(verl) -> None:
    _, policy, _ = verl
    version = policy.trainer.global_step
    metrics = policy.sync(version)
    assert metrics["sync/model_version"] == version
    assert all(engine.model_version() == version for engine in policy.engines())


def test_a_fresh_trainer_resumes_from_the_checkpoint(verl, renderer: ChatRenderer, checkpoint: Path) -> None:
    """A retried run starts new workers and loads the step: the same weights and step count."""
    _, policy, model_dir = verl
    exp = policy_contract.target_experience(renderer, eid="resume")
    policy.trainer.load_checkpoint(checkpoint / "actor")
    step, saved = policy.trainer.global_step, policy.trainer.logprobs([exp])[0]
    policy.release(engines=False)  # the trainer actor and its veRL workers (and placement group) are gone
    policy.start_trainer(model_dir, total_steps=100)
    policy.trainer.load_checkpoint(checkpoint / "actor")
    assert policy.trainer.global_step == step
    assert policy_contract._close(policy.trainer.logprobs([exp])[0], saved)


def test_the_checkpoint_converts_to_a_model_transformers_loads(checkpoint: Path, tmp_path: Path) -> None:
    import shutil

    from transformers import AutoModelForCausalLM

    from checkpointing.merge import convert_step, copy_side_files

    step = tmp_path / "global_step_1"
    shutil.copytree(checkpoint, step)
    model_dir = resolve_model_path(load_recipe("smoke").model.model_path)
    copy_side_files(model_dir, step / "actor" / "huggingface")  # as the save-checkpoint task does
    result = convert_step(step, None, False, "2GB")
    assert result["format"] == "verl-fsdp" and result["max_logit_diff"] <= result["tolerance"], result
    AutoModelForCausalLM.from_pretrained(result["model_dir"])
