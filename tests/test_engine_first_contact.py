"""What a GPU engine does differently from the CPU engines of every other test, reproduced on CPU (issue 70).

On a GPU vLLM runs its engine core in a process of its own and serialises every call into it; a run there has
several engines, each a member of one weight-transfer group. Here:
- an engine whose engine core is a separate process (VLLM_ENABLE_V1_MULTIPROCESSING=1, as on GPU) reloads
  synced weights: a call into it that carried a Python function was refused by vLLM's serialiser;
- two engines receive one `nccl` push (over gloo here): each engine's workers need ranks of their own in the
  group (1 and 2), where every engine was told to start at rank 1 and the rendezvous never completed.
After each sync the engines score as the trainer's weights do, position by position, not only "differently".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.rollout import SamplingSettings
from backends.weights import WeightsHandle
from workflows.render import renderer_for

EXPERIMENT = "test-first-contact"
QUESTION = [{"role": "user", "content": "What is the answer?"}]
PUSH_TIMEOUT_S = 60  # a rendezvous that cannot complete fails within this (the default would be an hour)


def _perturbed(model_dir: Path, seed: int):  # noqa: ANN202
    """The tiny model with every weight moved by seeded noise: what a trainer's step would hand the engines."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    return model


def _expected_top(model, sequence: list[int], start: int, k: int):  # noqa: ANN001, ANN202
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([sequence])).logits[0, start - 1 : -1]
    return torch.log_softmax(logits, -1).topk(k, dim=-1).values


def _scores_match(engine, model, prompt: list[int]) -> None:  # noqa: ANN001
    """The engine's top-5 log-probs along its own greedy answer equal the model's (float32, to a tolerance)."""
    import ray
    import torch

    [[sample]] = ray.get(engine.generate.remote([prompt], SamplingSettings(n=1, temperature=0.0, max_tokens=8)))
    sequence = prompt + sample.response_token_ids
    [scores] = ray.get(engine.score.remote([sequence], [len(prompt)], 5))
    expected = _expected_top(model, sequence, len(prompt), 5)
    assert torch.allclose(torch.tensor(scores.top_logprobs), expected, atol=2e-3), (scores.top_logprobs, expected)


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    import ray

    from backends.local import ray_cluster

    ray_cluster.connect("local")
    try:
        yield
    finally:
        ray.shutdown()


def _start(names: list[str], model_dir: str, sync_method: str, monkeypatch: pytest.MonkeyPatch | None = None) -> list:
    from backends.local import ray_cluster
    from backends.local.vllm_engine import EngineSettings, start_engine_actors

    settings = EngineSettings(model_path=model_dir, max_model_len=256, kv_cache_memory_bytes=1 << 28, dtype="float32",
                              seed=3, sync_method=sync_method)
    start_engine_actors(settings, names, threads=1, gpus=0)
    return [ray_cluster.get_actor(name) for name in names]


@pytest.mark.slow
def test_an_engine_with_its_engine_core_in_another_process_reloads_synced_weights(
    cluster: None, tiny_model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from backends.local.vllm_engine import stop_engine_actor

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # as on GPU: calls into the core are serialised
    name = f"{EXPERIMENT}-rollout-mp"
    [engine] = _start([name], tiny_model_path, "checkpoint")
    try:
        prompt = renderer_for(tiny_model_path).render(QUESTION)
        trained = _perturbed(Path(tiny_model_path), seed=1)
        trained.save_pretrained(tmp_path / "v1")
        ray.get(engine.load_weights.remote(WeightsHandle(1, "folder", str(tmp_path / "v1"))), timeout=300)
        _scores_match(engine, trained, prompt)
    finally:
        stop_engine_actor(name)


@pytest.mark.slow
def test_two_engines_receive_one_nccl_push(cluster: None, tiny_model_path: str) -> None:
    import ray

    from backends.local.vllm_engine import stop_engine_actor
    from backends.local.weight_sync import NcclTransport

    names = [f"{EXPERIMENT}-rollout-{i}" for i in range(2)]
    engines = _start(names, tiny_model_path, "nccl")
    try:
        prompt = renderer_for(tiny_model_path).render(QUESTION)
        transport = NcclTransport(use_gpu=False, timeout_s=PUSH_TIMEOUT_S)
        for version, seed in ((1, 1), (2, 2)):  # the group made once, then reused
            trained = _perturbed(Path(tiny_model_path), seed=seed)
            handle = transport.push_module(engines, trained, version)
            ray.get([engine.load_weights.remote(handle) for engine in engines], timeout=60)
            for engine in engines:
                assert ray.get(engine.model_version.remote()) == version
                _scores_match(engine, trained, prompt)
    finally:
        for name in names:
            stop_engine_actor(name)
