"""Agents and multi-turn on a real engine: one vLLM (CPU) rollout engine with its OpenAI endpoint
(vLLM's own server, 127.0.0.1), the real `openai` client, the q20 and tool-agent workflows, and the
torch trainer training on what the endpoint recorded.

The engine runs in this process (the class the Ray actors run), with the gsm8k-tools recipe's
settings: endpoint, history, the hermes tool-call parser and the ChatML-with-tools template.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process, as in the actors
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

from backends.history import rollout_base_url  # noqa: E402
from buffer.experience import Experience  # noqa: E402
from buffer.experience_store import ExperienceStore  # noqa: E402
from buffer.taskset import load_taskset  # noqa: E402
from checkpointing.models import resolve_model_path  # noqa: E402
from deployments import load_recipe  # noqa: E402
from schemas import TasksetConfig  # noqa: E402
from workflows.q20 import Oracle, load_entities  # noqa: E402
from workflows.render import renderer_for  # noqa: E402
from workflows.runner import WorkflowRunner  # noqa: E402
from workflows.tool_agent import CALCULATOR, CHATML_TOOLS_TEMPLATE  # noqa: E402
from workflows.trajectory import build_trajectories  # noqa: E402

pytestmark = pytest.mark.slow
MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
ENGINE = "test-agents-rollout-0"


@pytest.fixture(scope="module")
def config():
    return load_recipe("gsm8k-tools").with_overrides({"model.max_prompt_tokens": 896, "model.max_response_tokens": 128})


@pytest.fixture(scope="module")
def engine(config):
    from backends.local.vllm_engine import EngineSettings, VLLMEngine

    settings = EngineSettings.from_config(config, str(resolve_model_path(MODEL_ID)))
    settings = replace(settings, kv_cache_memory_bytes=2**29, sync_method="checkpoint")
    eng = VLLMEngine(ENGINE, asdict(settings))
    try:
        yield eng
    finally:
        eng.shutdown()


def client_for(engine, rollout_id: str):
    """The `openai` client of one rollout: its base URL carries the rollout id."""
    import openai

    return openai.OpenAI(base_url=rollout_base_url(engine.openai_base_url(), rollout_id), api_key="EMPTY", max_retries=0)


def test_endpoint_listens_on_localhost(engine) -> None:
    url = engine.openai_base_url()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    assert engine.info()["openai_base_url"] == url


def test_q20_on_vllm_trains_only_the_models_tokens(engine) -> None:
    """Each episode's experience, token by token: model turns (mask 1, vLLM's logprobs) and the
    oracle's replies rendered as a continuation of the exact sampled tokens (mask 0, logprob 0.0)."""
    renderer = renderer_for(MODEL_ID)
    tasks = load_taskset(TasksetConfig(name="q20", path="data/q20", split="train[:2]", default_workflow_type="q20",
                                       format={"prompt_key": "secret"}, rollout_args={"temperature": 1.0},
                                       workflow_args={"max_turns": 2, "max_tokens_per_turn": 16}))
    result = WorkflowRunner([engine], renderer, runner_per_model=2).run(tasks, explore_step=1, repeat_times=2,
                                                                         max_tokens=256)
    assert not result.failures and len(result.experiences) == 4
    entities = load_entities()
    for exp, task in zip(result.experiences, [t for t in tasks for _ in range(2)], strict=True):
        oracle = Oracle(next(e for e in entities if e.name == task.raw["secret"]), entities)
        runs: list[tuple[int, list[int]]] = []
        for token, m in zip(exp.response_token_ids, exp.response_mask, strict=True):
            if runs and runs[-1][0] == m:
                runs[-1][1].append(token)
            else:
                runs.append((m, [token]))
        assert runs[0][0] == 1 and [m for m, _ in runs] == [1, 0] * (len(runs) // 2) + [1] * (len(runs) % 2)
        assert exp.info["turns"] == len([r for r in runs if r[0] == 1]) <= 2
        for (_, turn), (_, context) in zip(runs[0::2], runs[1::2]):
            reply, _ = oracle.answer(renderer.decode(turn))
            assert context == renderer.continuation([{"role": "user", "content": reply}], turn)
        for lp, m in zip(exp.logprobs, exp.response_mask, strict=True):
            assert (lp < 0.0) if m else (lp == 0.0)
    # what goes into the buffer keeps the mask
    store_dir = Path(f"/tmp/{ENGINE}-store")
    shutil.rmtree(store_dir, ignore_errors=True)
    with ExperienceStore(store_dir / "experiences.db") as store:
        store.put(result.experiences)
        stored = {e.eid: e for e in store.take(len(result.experiences))}
    assert all(stored[e.eid].response_mask == e.response_mask for e in result.experiences)
    shutil.rmtree(store_dir, ignore_errors=True)


def test_openai_client_chat_streaming_and_tool_calls_are_recorded(engine) -> None:
    client = client_for(engine, "chat-test")
    renderer = renderer_for(MODEL_ID, CHATML_TOOLS_TEMPLATE)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    reply = client.chat.completions.create(model="policy", messages=chat, max_tokens=12, temperature=1.0,
                                           logprobs=True)
    (call,) = engine.call_history("chat-test")
    assert call.prompt_token_ids == renderer.render(chat)  # the server renders as the workflows do
    assert call.logprobs == pytest.approx([t.logprob for t in reply.choices[0].logprobs.content], abs=1e-4)
    assert call.text == reply.choices[0].message.content and len(call.response_token_ids) <= 12 and not call.constrained

    stream = client.chat.completions.create(model=MODEL_ID, messages=chat, max_tokens=12, stream=True)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    (call,) = engine.call_history("chat-test")
    assert call.text == streamed and len(call.logprobs) == len(call.response_token_ids) > 0

    tools = [{"role": "user", "content": "What is 12 * 7? Use the calculator."}]
    forced = client.chat.completions.create(  # a named tool: vLLM constrains the output to a call of it
        model="policy", messages=tools, tools=[CALCULATOR], max_tokens=60, temperature=0.0,
        tool_choice={"type": "function", "function": {"name": "calculator"}},
    )
    message = forced.choices[0].message
    assert message.tool_calls, f"no tool call parsed from {message.content!r}"
    (tool_call,) = message.tool_calls
    assert tool_call.function.name == "calculator" and "expression" in json.loads(tool_call.function.arguments)
    (call,) = engine.call_history("chat-test")
    assert call.prompt_token_ids == renderer.render(tools, tools=[CALCULATOR])
    assert call.constrained  # sampled under the tool's JSON grammar: context, not a training target

    header = client.with_options(base_url=engine.openai_base_url(), default_headers={"X-Rollout-Id": "by-header"})
    header.chat.completions.create(model="policy", messages=chat, max_tokens=4)
    assert len(engine.call_history("by-header")) == 1 and engine.call_history("chat-test") == []


@pytest.mark.full  # CI's 90 minutes: scripts/test.sh --full (docs/testing.md, 2026-11-29)
def test_tool_agent_runs_through_the_endpoint_and_its_calls_are_trained(config, engine) -> None:
    from backends.torch_trainer import TorchTrainer

    tasks = load_taskset(TasksetConfig(name="gsm8k", path="data/gsm8k", split="train[:2]",
                                       default_workflow_type="gsm8k_tool_agent",
                                       format={"prompt_key": "question", "response_key": "answer"},
                                       rollout_args={"temperature": 1.0, "max_tokens": 80},
                                       workflow_args={"max_calls": 2, "episode_timeout_s": 240,
                                                      "first_call": "calculator"}))
    renderer = renderer_for(MODEL_ID, CHATML_TOOLS_TEMPLATE)
    result = WorkflowRunner([engine], renderer, runner_per_model=2).run(tasks, explore_step=1, repeat_times=2)
    assert not result.failures and len(result.experiences) == 4
    for exp in result.experiences:
        assert exp.info["rollout_id"].startswith(exp.group_id) and exp.info["calls_skipped"] == 0
        assert len(exp.response_mask) == len(exp.response_token_ids) and exp.response_mask[-1] == 1
        assert {"accuracy", "format", "tool"} <= set(exp.reward_breakdown)
        # one trajectory per episode: the forced call as sampled and the tool result (context, mask 0),
        # then the model's own answer (mask 1), continuing the exact tokens the engine sampled
        assert exp.info["trajectories"] == 1 and exp.info["calls"] == 2 and exp.info["tool_calls"] >= 1
        context = exp.response_mask.index(1)
        assert set(exp.response_mask[:context]) == {0} and set(exp.response_mask[context:]) == {1}
        masked = renderer.decode_raw(exp.response_token_ids[:context])
        assert masked.startswith("<tool_call>") and "<tool_response>" in masked and masked.endswith("assistant\n")

    # train on what the endpoint recorded: the trainer sees the same tokens and (nearly) the same logprobs
    trainer = TorchTrainer(config, resolve_model_path(MODEL_ID), total_steps=1)
    batch: list[Experience] = result.experiences
    for i, exp in enumerate(batch):
        exp.advantage = 1.0 if i % 2 == 0 else -1.0
    before = trainer.logprobs(batch)
    for exp, recomputed in zip(batch, before, strict=True):
        trained = [(a, b) for a, b, m in zip(recomputed, exp.logprobs, exp.response_mask, strict=True) if m]
        assert sum(abs(a - b) for a, b in trained) / len(trained) < 0.05
    metrics = trainer.train_step(batch)
    assert metrics["loss"] == metrics["loss"] and metrics["grad_norm"] > 0  # finite, and something was learned
    after = trainer.logprobs(batch)
    assert any(abs(a - b) > 1e-4 for x, y in zip(before, after, strict=True) for a, b in zip(x, y, strict=True))


def test_recorded_calls_become_trajectories(engine) -> None:
    """An agent that sends its conversation back: the second call continues the first exactly."""
    client = client_for(engine, "trajectory-test")
    chat = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "A fruit?"}]
    first = client.chat.completions.create(model="policy", messages=chat, max_tokens=8, temperature=1.0)
    chat += [{"role": "assistant", "content": first.choices[0].message.content},
             {"role": "user", "content": "Another one?"}]
    client.chat.completions.create(model="policy", messages=chat, max_tokens=8, temperature=1.0)
    calls = engine.call_history("trajectory-test")
    trajectories = build_trajectories(calls)
    assert sum(t.calls for t in trajectories) == 2
    if len(trajectories) == 1:  # the template wrote the first answer back as it was sampled
        (t,) = trajectories
        assert 0 in t.mask and t.mask[0] == 1 and t.tokens[-len(calls[1].response_token_ids):] == calls[1].response_token_ids
