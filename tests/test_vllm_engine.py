"""Real Ray + real vLLM (CPU) + real SmolLM2: generation, lookup by name, and weight sync."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backends.local.weight_sync import install_safetensors, make_transport
from backends.rollout import SamplingSettings
from backends.weights import WeightsHandle
from checkpointing.models import resolve_model_path
from workflows.render import renderer_for

MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EXPERIMENT = "test-vllm-engine"
QUESTION = [{"role": "user", "content": "What is the answer?"}]
TARGET = "The answer is 42."


# --- fast: transport selection and the file swap ---------------------------------------------


def test_transport_selection() -> None:
    on_cpu = make_transport("nccl", use_gpu=False)  # the same push, over gloo where NCCL is missing
    assert on_cpu.pushes_tensors and on_cpu.transfer_backend == "gloo"
    assert on_cpu.llm_kwargs() == {"weight_transfer_config": {"backend": "gloo"}}
    assert make_transport("nccl", use_gpu=True).transfer_backend == "nccl"
    assert not make_transport("memory", use_gpu=False).pushes_tensors
    with pytest.raises(ValueError, match=r"synchronizer\.sync_method='rsync'"):
        make_transport("rsync", use_gpu=False)
    assert make_transport("checkpoint", use_gpu=False).sync_method == "checkpoint"
    assert make_transport("memory", use_gpu=False).sync_method == "memory"


def test_install_safetensors_replaces_links_not_the_base_model(tmp_path: Path) -> None:
    base, serve, new = tmp_path / "base", tmp_path / "serve", tmp_path / "new"
    for d in (base, serve, new):
        d.mkdir()
    (base / "model.safetensors").write_bytes(b"old")
    (serve / "model.safetensors").symlink_to(base / "model.safetensors")
    (new / "model.safetensors").write_bytes(b"new")
    assert install_safetensors(new, serve) == ["model.safetensors"]
    assert (serve / "model.safetensors").read_bytes() == b"new"
    assert (base / "model.safetensors").read_bytes() == b"old"
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        install_safetensors(tmp_path / "base" / "..", serve)


# --- slow: the real stack ---------------------------------------------------------------------


@pytest.mark.slow
def test_resolve_model_path_converts_once_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RFT_CACHE_DIR", str(tmp_path / "cache"))
    path = resolve_model_path(MODEL_ID)
    assert path == tmp_path / "cache" / MODEL_ID
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    assert (path / "generation_config.json").is_file()
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert resolve_model_path(MODEL_ID) == path  # reused, not rewritten
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp folders left
    assert resolve_model_path(str(path)) == path  # a local folder is used as-is
    with pytest.raises(FileNotFoundError, match="without config.json"):
        resolve_model_path(str(tmp_path))
    assert resolve_model_path("org/other-model") == Path("org/other-model")  # left to the hub


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return resolve_model_path(MODEL_ID)  # the shared cache: converted once per machine


@pytest.fixture(scope="module")
def renderer(model_dir: Path):
    return renderer_for(str(model_dir))


@pytest.fixture(scope="module")
def engine(model_dir: Path):
    import ray

    from backends.local import ray_cluster
    from backends.local.vllm_engine import EngineSettings, start_engine_actors, stop_engine_actor

    ray_cluster.connect("local")  # a private cluster, never another run's
    settings = EngineSettings(
        model_path=str(model_dir), max_model_len=512, kv_cache_memory_bytes=1 << 30, dtype="float32", seed=7,
        enable_prefix_caching=True,  # as every recipe has it
    )
    name = f"{EXPERIMENT}-rollout-0"
    start_engine_actors(settings, [name], threads=None, gpus=0)
    try:
        yield ray_cluster.get_actor(name)
    finally:
        stop_engine_actor(name)
        ray.shutdown()


@pytest.mark.slow
def test_generate_returns_n_samples_with_token_logprobs(engine, renderer) -> None:
    import ray

    chats = [renderer.render(QUESTION), renderer.render([{"role": "user", "content": "Name three colours."}])]
    results = ray.get(engine.generate.remote(chats, SamplingSettings(n=3, temperature=1.0, max_tokens=12, seed=1)))
    assert len(results) == 2 and all(len(samples) == 3 for samples in results)
    for prompt, samples in zip(chats, results):
        assert {tuple(s.prompt_token_ids) for s in samples} == {tuple(prompt)}
        for s in samples:
            assert 0 < len(s.response_token_ids) <= 12
            assert len(s.logprobs) == len(s.response_token_ids)
            assert all(lp <= 0.0 for lp in s.logprobs)
            assert s.finish_reason in ("stop", "length")
    # 12 tokens is too few for "three colours" with this model: at least one sample hits the limit.
    assert any(s.finish_reason == "length" for s in results[1])


@pytest.mark.slow
def test_a_short_call_returns_while_a_long_one_samples(engine, renderer) -> None:
    """Calls made at once are batched by the engine's loop and each returns when its own requests are done: a
    workflow calling again (a calculator's value) never waits for another task's longest sequence."""
    import ray

    prompt = renderer.render(QUESTION)
    long = engine.generate.remote([prompt], SamplingSettings(n=4, max_tokens=200, min_tokens=200, seed=1))
    ray.wait([long], timeout=2)  # let it start sampling
    [[short]] = ray.get(engine.generate.remote([prompt], SamplingSettings(n=1, max_tokens=4, seed=2)))
    assert len(short.response_token_ids) <= 4
    ready, _ = ray.wait([long], timeout=0)
    assert not ready  # the long call is still sampling: the short one did not wait for it
    assert all(len(s.response_token_ids) == 200 for s in ray.get(long)[0])


@pytest.mark.slow
def test_chat_template_and_logprobs_match_the_sampling_distribution(engine, model_dir, renderer) -> None:
    import ray
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    temperature = 0.7
    prompt = renderer.render(QUESTION)
    [[sample]] = ray.get(
        engine.generate.remote([prompt], SamplingSettings(n=1, temperature=temperature, max_tokens=16, seed=3))
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    text = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    assert sample.prompt_token_ids == prompt == tokenizer.encode(text, add_special_tokens=False)

    # What the trainer recomputes: log_softmax(logits / T) at the sampled tokens.
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = torch.tensor([sample.prompt_token_ids + sample.response_token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(sample.prompt_token_ids) - 1 : -1] / temperature
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(sample.response_token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=2e-2)
    # ...and not the raw (temperature 1) logprobs vLLM would report by default.
    raw = torch.log_softmax(logits * temperature, -1).gather(1, torch.tensor(sample.response_token_ids)[:, None])[:, 0]
    assert not torch.allclose(torch.tensor(sample.logprobs), raw, atol=2e-2)


def _log_probs(model_dir: Path, sequence: list[int], start: int):  # noqa: ANN202
    """The model's own log-probs over the vocabulary at each position from `start` on (transformers, float32)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([sequence])).logits[0, start - 1 : -1], -1)


@pytest.mark.slow
def test_a_teacher_scores_given_tokens_with_its_top_k(engine, model_dir, renderer) -> None:
    """score with k (a teacher for topk_distill): at each position from the start on, the given token's log-prob and
    the model's k likeliest tokens, likeliest first, as the model itself computes them at temperature 1."""
    import ray
    import torch

    prompt = renderer.render(QUESTION)
    [[sample]] = ray.get(engine.generate.remote([prompt], SamplingSettings(n=1, temperature=1.0, max_tokens=10, seed=5)))
    sequence, k = prompt + sample.response_token_ids, 5
    [scores] = ray.get(engine.score.remote([sequence], [len(prompt)], k))
    [given] = ray.get(engine.score.remote([sequence], [len(prompt)]))
    assert scores.logprobs == given.logprobs and len(scores.top_ids) == len(sample.response_token_ids)
    log_probs = _log_probs(model_dir, sequence, len(prompt))
    expected = log_probs.topk(k, dim=-1)
    assert torch.allclose(torch.tensor(scores.top_logprobs), expected.values, atol=2e-2)
    assert all(len(ids) == k for ids in scores.top_ids)
    # The same tokens, bar near-ties swapped between neighbouring ranks.
    assert [set(ids) for ids in scores.top_ids] == [set(ids) for ids in expected.indices.tolist()] or \
        torch.allclose(log_probs.gather(1, torch.tensor(scores.top_ids)), expected.values, atol=2e-2)


@pytest.mark.slow
def test_engine_is_found_by_name_from_a_fresh_lookup(engine) -> None:
    import ray

    from backends.local import ray_cluster
    from backends.local.engine_client import EngineClient
    from backends.local.vllm_engine import CPU_PREFIX_BLOCK, EngineSettings, start_engine_actors

    name = f"{EXPERIMENT}-rollout-0"
    assert ray_cluster.actor_names(f"{EXPERIMENT}-rollout-") == [name]
    client = EngineClient(name)
    assert client.info()["name"] == name and client.alive()
    # KV blocks short enough that a system prompt fills one: vLLM's CPU default of 128 tokens is never reused.
    assert client.info()["block_size"] == CPU_PREFIX_BLOCK
    assert client.model_version() == ray.get(engine.model_version.remote())
    with pytest.raises(LookupError, match="no actor named"):
        EngineClient(f"{EXPERIMENT}-rollout-9")
    # A retried flow starting the engines again gets the running engine, not a second one.
    info = client.info()
    start_engine_actors(EngineSettings(model_path=info["model_path"], max_model_len=512), [name], threads=None, gpus=0)
    assert EngineClient(name).info()["start_seconds"] == info["start_seconds"]


def _train_toward(model_dir: Path, out_dir: Path, target: str, steps: int = 40) -> None:
    """A few large-learning-rate steps that make the model answer QUESTION with `target`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    prompt = tokenizer.encode(
        tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False), add_special_tokens=False
    )
    response = tokenizer.encode(target + "<|im_end|>", add_special_tokens=False)
    ids = torch.tensor([prompt + response])
    labels = torch.tensor([[-100] * len(prompt) + response])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if loss.item() < 0.01:
            break
    model.save_pretrained(out_dir)


@pytest.mark.slow
def test_after_sync_the_engine_samples_from_the_new_weights(engine, model_dir, renderer, tmp_path: Path) -> None:
    import ray
    import torch

    greedy = SamplingSettings(n=1, temperature=0.0, max_tokens=16)
    [[before]] = ray.get(engine.generate.remote([renderer.render(QUESTION)], greedy))
    assert before.text.strip() != TARGET
    version = ray.get(engine.model_version.remote())

    trained = tmp_path / "trained"
    _train_toward(model_dir, trained, TARGET)
    seconds = ray.get(engine.load_weights.remote(WeightsHandle(version + 1, "folder", str(trained))))
    print(f"\nsync took {seconds:.2f} s")

    [[after]] = ray.get(engine.generate.remote([renderer.render(QUESTION)], greedy))
    assert after.text.strip() == TARGET
    assert after.finish_reason == "stop"
    assert ray.get(engine.model_version.remote()) == version + 1
    # The engine scores as the new weights do at every position, its tied lm_head included: on CPU a reload once
    # left that head's kernel on the weights the engine started with (greedy 0.817 against 0.867 on arith).
    prompt = renderer.render(QUESTION)
    sequence = prompt + after.response_token_ids
    [scores] = ray.get(engine.score.remote([sequence], [len(prompt)], 5))
    assert torch.allclose(torch.tensor(scores.top_logprobs), _log_probs(trained, sequence, len(prompt)).topk(5, dim=-1).values, atol=2e-2)
    # The base model's file was not touched: the engine's folder got its own copy/link.
    assert os.path.realpath(model_dir / "model.safetensors") != os.path.realpath(
        Path(ray.get(engine.info.remote())["serve_dir"]) / "model.safetensors"
    )
