"""The architectures users bring, through the engine, the torch trainer, every sync, LoRA and `rft convert` (issue 71).

Each family of checkpointing/tiny_models.py (Qwen2, Qwen3, Llama 3, Gemma 3, a Qwen3 mixture of experts) is a
random tiny model with its family's tokens and chat template. Per family, one vLLM CPU engine and the torch trainer:
- the trainer learns a target answer, and after each sync (a checkpoint folder, a /dev/shm folder as `memory` sync
  on CPU, the `nccl` push over gloo) the engine answers it greedily, stops at the family's end-of-turn token, and
  scores it as the trainer does, position by position (top-5 log-probs, float32 tolerance): a weight name that
  does not map leaves the engine on stale weights and fails this, not only "the sample changed";
- a LoRA adapter on the family's target modules, its merged export loaded by the engine;
- the trainer's checkpoint through `rft convert` loads in transformers with the trainer's logits.
veRL's step per family is in tests/test_model_matrix_verl.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from backends.rollout import SamplingSettings
from buffer.experience import Experience
from checkpointing import tiny_models
from deployments import load_recipe
from workflows.render import ChatRenderer, renderer_for

pytestmark = pytest.mark.slow
QUESTION = [{"role": "user", "content": "What is the answer?"}]
TARGET = "The answer is 42."
LR = 3e-3  # a few dozen steps teach the target and move every weight well past the tolerance below
ATOL = 2e-3  # float32 engine against float32 transformers, top-5 log-probs


@dataclass
class Family:
    name: str
    model_dir: str
    engine: Any  # the engine's Ray actor
    renderer: ChatRenderer


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    import ray

    from backends.local import ray_cluster

    ray_cluster.connect("local")
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def prefect_server() -> Iterator[None]:
    """One Prefect server for every family's `rft convert` (a flow)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="module", params=list(tiny_models.FAMILIES))
def family(request: pytest.FixtureRequest, cluster: None) -> Iterator[Family]:
    from backends.local import ray_cluster
    from backends.local.vllm_engine import EngineSettings, start_engine_actors, stop_engine_actor
    from checkpointing.models import resolve_model_path

    name = request.param
    model_dir = str(resolve_model_path(f"{tiny_models.PREFIX}{name}"))
    engine_name = f"test-model-matrix-{name}"
    settings = EngineSettings(model_path=model_dir, max_model_len=256, kv_cache_memory_bytes=1 << 28, dtype="float32",
                              seed=3, sync_method="nccl")  # pushes; a folder handle loads through it too
    start_engine_actors(settings, [engine_name], threads=2, gpus=0)
    try:
        yield Family(name, model_dir, ray_cluster.get_actor(engine_name), renderer_for(model_dir))
    finally:
        stop_engine_actor(engine_name)


def _trainer(model_dir: str, **overrides: Any):  # noqa: ANN202
    from backends.torch_trainer import TorchTrainer

    config = load_recipe("smoke").with_overrides({
        "model.model_path": model_dir, "algorithm.optimizer.lr": LR, "algorithm.optimizer.weight_decay": 0.0,
        "trainer.num_threads": 2, **overrides,
    })
    return TorchTrainer(config, Path(model_dir), total_steps=100)


def _target(family: Family) -> Experience:
    """QUESTION answered with TARGET and the family's end-of-turn token."""
    response = family.renderer.encode(TARGET + tiny_models.FAMILIES[family.name].end_of_turn)
    return Experience(eid="target", task_id="t", group_id="g", prompt_token_ids=family.renderer.render(QUESTION),
                      response_token_ids=response, logprobs=[0.0] * len(response), reward=1.0, advantage=1.0)


def _learn(trainer: Any, exp: Experience, max_steps: int = 150) -> Experience:
    """Steps on the target until the trainer answers it greedily (each token at p > 0.9)."""
    for _ in range(max_steps):
        exp.logprobs = trainer.logprobs([exp])[0]
        if min(exp.logprobs) > math.log(0.9):
            return exp
        trainer.train_step([exp])
    raise AssertionError(f"the trainer did not learn the target in {max_steps} steps: {exp.logprobs}")


def _top(model: Any, sequence: list[int], start: int, k: int = 5):  # noqa: ANN202
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([sequence])).logits[0, start - 1 : -1].float()
    return torch.log_softmax(logits, -1).topk(k, dim=-1).values


def _engine_matches(family: Family, model: Any, exp: Experience, greedy: bool = True) -> None:
    """The engine's top-5 log-probs along the target equal the trainer model's; `greedy`: it also answers the target
    greedily and stops at the family's end-of-turn token."""
    import ray
    import torch

    prompt = exp.prompt_token_ids
    if greedy:
        settings = SamplingSettings(n=1, temperature=0.0, max_tokens=32)
        [[sample]] = ray.get(family.engine.generate.remote([prompt], settings))
        assert sample.response_token_ids == exp.response_token_ids, (
            family.renderer.decode_raw(sample.response_token_ids), family.renderer.decode_raw(exp.response_token_ids))
        assert sample.finish_reason == "stop"  # the end-of-turn token ended it, not max_tokens
    sequence = prompt + exp.response_token_ids
    [scores] = ray.get(family.engine.score.remote([sequence], [len(prompt)], 5))
    expected = _top(model, sequence, len(prompt))
    gap = (torch.tensor(scores.top_logprobs) - expected).abs().max().item()
    assert gap <= ATOL, f"{family.name}: the engine's log-probs differ from the trainer's by {gap:.4f}"


def test_the_engine_samples_from_the_untrained_model(family: Family) -> None:
    import ray

    prompt = family.renderer.render(QUESTION)
    [[sample]] = ray.get(family.engine.generate.remote([prompt], SamplingSettings(n=1, temperature=1.0, max_tokens=8)))
    assert 0 < len(sample.response_token_ids) <= 8 and len(sample.logprobs) == len(sample.response_token_ids)


def test_every_sync_method_gives_the_engine_the_trainer_weights(family: Family, tmp_path: Path) -> None:
    """Checkpoint folder, /dev/shm folder (`memory` on CPU), then the `nccl` push over gloo: after each the engine
    scores as the trainer does. Between syncs the trainer moves on, so a sync that changed nothing fails."""
    import ray

    from backends.local.weight_sync import NcclTransport, memory_staging_dir

    trainer = _trainer(family.model_dir)
    exp = _learn(trainer, _target(family))
    handle = trainer.publish_weights(1, tmp_path / "checkpoint" / "v1")
    ray.get(family.engine.load_weights.remote(handle), timeout=300)
    _engine_matches(family, trainer.model, exp)

    trainer.train_step([exp])  # one more step: sharper, and different weights
    exp = _learn(trainer, exp)
    staging = memory_staging_dir(tmp_path, f"matrix-{family.name}") / "v2"
    try:
        ray.get(family.engine.load_weights.remote(trainer.publish_weights(2, staging)), timeout=300)
        _engine_matches(family, trainer.model, exp)
    finally:
        import shutil

        shutil.rmtree(staging.parent.parent, ignore_errors=True)

    trainer.train_step([exp])
    exp = _learn(trainer, exp)
    handle = trainer.push_weights(NcclTransport(use_gpu=False, timeout_s=120), [family.engine], 3)
    ray.get(family.engine.load_weights.remote(handle), timeout=60)
    _engine_matches(family, trainer.model, exp)


@pytest.mark.parametrize("targets", ["family", "all-linear"])
def test_a_lora_adapter_exports_merged_weights_the_engine_loads(family: Family, targets: str, tmp_path: Path) -> None:
    """On the family's documented target modules, and on the default 'all-linear' (which on the MoE also adapts the
    router and the fused experts)."""
    import ray

    modules = list(tiny_models.FAMILIES[family.name].lora_targets) if targets == "family" else targets
    trainer = _trainer(family.model_dir, **{"model.lora_configs": [
        {"lora_rank": 8, "lora_alpha": 16, "target_modules": modules}]})
    adapted = {name.split(".")[-1] for name, _ in trainer.model.named_modules() if hasattr(_, "lora_A")}
    assert adapted >= set(tiny_models.FAMILIES[family.name].lora_targets)
    exp = _target(family)
    before = sum(trainer.logprobs([exp])[0])
    for _ in range(10):  # the adapter alone learns slowly on a random model; it need only move the weights
        exp.logprobs = trainer.logprobs([exp])[0]
        trainer.train_step([exp])
    assert sum(trainer.logprobs([exp])[0]) > before + 1.0
    handle = trainer.publish_weights(10, tmp_path / "lora" / "v10")
    ray.get(family.engine.load_weights.remote(handle), timeout=300)
    _engine_matches(family, trainer.model, exp, greedy=False)


def test_rft_convert_of_a_checkpoint_loads_in_transformers_with_the_trainer_logits(
    family: Family, tmp_path: Path, prefect_server: None
) -> None:
    import torch
    from transformers import AutoModelForCausalLM
    from typer.testing import CliRunner

    from cli.main import app

    trainer = _trainer(family.model_dir)
    exp = _target(family)
    for _ in range(3):
        trainer.train_step([exp])
    step = tmp_path / "proj" / "global_step_3"
    trainer.save_checkpoint(step / "actor")
    result = CliRunner().invoke(app, ["convert", "--checkpoint-dir", str(step), "--base-model-dir", family.model_dir])
    assert result.exit_code == 0, result.output
    converted = AutoModelForCausalLM.from_pretrained(step / "actor" / "huggingface", dtype=torch.float32)
    sequence = exp.prompt_token_ids + exp.response_token_ids
    ids = torch.tensor([sequence])
    with torch.no_grad():
        expected, got = trainer.model(input_ids=ids).logits, converted(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(family.model_dir, dtype=torch.float32)(input_ids=ids).logits
    assert (got - expected).abs().max() <= 1e-4 * expected.abs().max()
    assert (base - expected).abs().max() > 1e-2 * expected.abs().max()  # the steps moved the weights
