"""Multi-turn workflows, the q20 oracle, trajectories from recorded calls, masks in the loss, the
endpoint's rollout ids and the config rules of the endpoint — all without starting an engine.

Model turns come from a scripted `RolloutEngine` (token ids through the real SmolLM2 tokenizer), so
every token of a trajectory can be checked exactly; tests/test_agents.py does the same on real vLLM.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
import torch

import algorithms
from backends.batch import collate
from backends.history import (
    CallHistory,
    CallRecord,
    RolloutIdMiddleware,
    continue_sampled,
    current_rollout_id,
    rollout_base_url,
)
from backends.rollout import RolloutEngine, Sample, SamplingSettings, TokenIds
from buffer.experience import Experience
from buffer.taskset import Task, load_taskset
from deployments import load_recipe
from schemas import ExperimentConfig, TasksetConfig
from tests.stand_in_engine import StandInEngine
from workflows import get_workflow
from workflows.multi_turn import Env, EnvStep, EpisodeFailure, MultiTurnWorkflow, episode_stats
from workflows.q20 import Oracle, load_entities
from workflows.render import renderer_for
from workflows.runner import CoalescingEngine, WorkflowRunner
from workflows.tool_agent import CALCULATOR, CHATML_TOOLS_TEMPLATE, calculate
from workflows.trajectory import build_trajectories

RENDERER = renderer_for("HuggingFaceTB/SmolLM2-135M-Instruct")
EOS = 2  # <|im_end|>: SmolLM2 ends its turns with it (vLLM keeps it in the sampled ids)


class ScriptedPlayer(StandInEngine):
    """Each prompt gets the next line of its episode's script (episodes told apart by turn count)."""

    def __init__(self, script: list[str], *, stop: bool = True) -> None:
        super().__init__()
        self.script = script
        self.stop = stop
        self.turns: dict[tuple[int, ...], int] = {}
        self.calls: list[tuple[int, SamplingSettings]] = []

    def generate(self, prompts: list[TokenIds], sampling: SamplingSettings) -> list[list[Sample]]:
        self.calls.append((len(prompts), sampling))
        out = []
        for prompt in prompts:
            turn = RENDERER.decode_raw(prompt).count("<|im_start|>assistant") - 1
            ids = RENDERER.encode(self.script[min(turn, len(self.script) - 1)])[: sampling.max_tokens]
            if self.stop and len(ids) < sampling.max_tokens:
                ids = [*ids, EOS]
            out.append([Sample(list(prompt), ids, [-0.5] * len(ids), "stop" if self.stop else "length")])
        return out


def q20_task(secret: str, **workflow_args: Any) -> Task:
    return Task(task_id=f"q20/train/{secret}", raw={"secret": secret}, workflow_args=dict(workflow_args),
                workflow_type="q20", format=TasksetConfig(path="data/q20").format)


def run_q20(engine: RolloutEngine, secret: str = "dog", repeat: int = 2, max_tokens: int = 320, **args: Any) -> list[Experience]:
    workflow = get_workflow("q20")(q20_task(secret, **args), engine, RENDERER, repeat_times=repeat, explore_step=1,
                                   model_version=0, max_tokens=max_tokens)
    return workflow.run()


def segments(exp: Experience) -> list[tuple[int, list[int]]]:
    """The response as runs of (mask value, token ids)."""
    runs: list[tuple[int, list[int]]] = []
    for token, m in zip(exp.response_token_ids, exp.response_mask, strict=True):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(token)
        else:
            runs.append((m, [token]))
    return runs


# -- continuation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("template", [None, CHATML_TOOLS_TEMPLATE], ids=["smollm2", "chatml-tools"])
def test_continuation_appends_exactly_what_the_template_renders(template: str | None) -> None:
    renderer = renderer_for("HuggingFaceTB/SmolLM2-135M-Instruct", template)
    chat = [{"role": "system", "content": "Play."}, {"role": "user", "content": "Go"}]
    prompt = renderer.render(chat)
    turn = [*renderer.encode("Is it an animal?"), EOS]
    env = [{"role": "user", "content": "Yes."}]
    continued = prompt + turn + renderer.continuation(env, turn)
    assert continued == renderer.render([*chat, {"role": "assistant", "content": "Is it an animal?"}, *env])
    # a turn cut off by max_tokens is closed first
    cut = renderer.encode("Is it")
    assert renderer.decode_raw(renderer.continuation(env, cut)).startswith("<|im_end|>\n<|im_start|>user\nYes.")


# -- q20 ---------------------------------------------------------------------------------------------


def test_oracle_answers_categories_attributes_and_guesses() -> None:
    entities = load_entities()
    dog = Oracle(next(e for e in entities if e.name == "dog"), entities)
    assert dog.answer("Is it an animal?") == ("Yes.", True)
    assert dog.answer("Is it a vehicle?") == ("No.", False)
    assert dog.answer("Can it fly?") == ("No.", False)
    assert dog.answer("Does it have legs?") == ("Yes.", True)
    assert dog.answer("Is it small?") == ("Yes.", True)
    assert dog.answer("Is it a cat?") == ("No, it is not the cat.", False)
    assert dog.answer("Is it a dog?") == ("Yes! It is the dog.", True)
    assert dog.answer("Is it a cat or a dog?")[1] is None
    assert dog.answer("Hello there")[1] is None
    assert len(entities) == 28 and {e.category for e in entities} == {"animal", "food", "object", "vehicle"}


def test_q20_episode_masks_train_only_the_models_turns() -> None:
    script = ["Is it an animal?", "Hello", "Is it a cat?", "Is it a dog?"]
    engine = ScriptedPlayer(script)
    with CoalescingEngine(engine) as coalesced:  # what the runner gives workflows
        exps = run_q20(coalesced, "dog", repeat=2, max_turns=6)
    assert len(exps) == 2 and len({e.group_id for e in exps}) == 1
    for exp in exps:
        runs = segments(exp)
        # model turn, env reply, model, env, model, env, model (the guess ends the episode)
        assert [m for m, _ in runs] == [1, 0, 1, 0, 1, 0, 1]
        model_turns = [ids for m, ids in runs if m == 1]
        assert model_turns == [[*RENDERER.encode(line), EOS] for line in script]
        env_turns = [ids for m, ids in runs if m == 0]
        replies = ["Yes.", dog_reply("Hello"), "No, it is not the cat."]
        for ids, reply, turn in zip(env_turns, replies, model_turns[:-1], strict=True):
            assert ids == RENDERER.continuation([{"role": "user", "content": reply}], turn)
        # rollout logprobs on the model's tokens, 0.0 on the env's
        assert all(lp == (-0.5 if m else 0.0) for lp, m in zip(exp.logprobs, exp.response_mask, strict=True))
        assert exp.reward == pytest.approx(1.0 - 0.05)  # found it; one turn the oracle could not answer
        assert exp.reward_breakdown["accuracy"] == 1.0
        assert exp.info["turns"] == 4 and exp.info["success"] and exp.info["stop"] == "done"
        assert exp.info["turn_rewards"] == [0.0, -0.05, 0.0, 0.0]
    # each episode plays in its own thread; their turns share engine calls
    assert sum(n for n, _ in engine.calls) == 8 and max(n for n, _ in engine.calls) == 2
    assert all(s.max_tokens == 64 and s.n == 1 for _, s in engine.calls)


def dog_reply(question: str) -> str:
    entities = load_entities()
    return Oracle(next(e for e in entities if e.name == "dog"), entities).answer(question)[0]


def test_q20_stops_at_max_turns_and_at_the_token_budget() -> None:
    exps = run_q20(ScriptedPlayer(["Is it an animal?"]), "dog", repeat=1, max_turns=3)
    assert exps[0].info["stop"] == "max_turns" and exps[0].info["turns"] == 3 and exps[0].reward == 0.0
    assert exps[0].response_mask[-1] == 1  # nothing follows the last model turn
    tight = run_q20(ScriptedPlayer(["Is it an animal?"]), "dog", repeat=1, max_turns=50, max_tokens=60)
    assert tight[0].info["stop"] == "budget" and len(tight[0].response_token_ids) <= 60


def test_q20_turn_cut_by_max_tokens_is_closed_as_context() -> None:
    exps = run_q20(ScriptedPlayer(["Is it an animal that lives on a farm and gives milk?"], stop=False), "cow",
                   repeat=1, max_turns=2, max_tokens_per_turn=5)
    runs = segments(exps[0])
    assert [m for m, _ in runs] == [1, 0, 1] and len(runs[0][1]) == 5
    assert RENDERER.decode_raw(runs[1][1]).startswith("<|im_end|>\n<|im_start|>user\n")


class SlowEnv(Env):
    def __init__(self, delay: float) -> None:
        self.delay = delay

    def initial_messages(self) -> list[dict]:
        return [{"role": "user", "content": "Say something."}]

    def step(self, response: str) -> EnvStep:
        time.sleep(self.delay)
        return EnvStep([{"role": "user", "content": "Again."}], reward=1.0, done=False)


class SlowWorkflow(MultiTurnWorkflow):
    name = "slow_test"

    def make_env(self, index: int) -> Env:
        return SlowEnv(self.task.workflow_args["delays"][index])


def test_a_stuck_environment_fails_its_episode_with_a_reason_not_the_task() -> None:
    task = Task(task_id="slow/0", raw={}, workflow_args={"delays": [0.0, 30.0], "episode_timeout_s": 1.5, "max_turns": 2})
    started = time.monotonic()
    exps = SlowWorkflow(task, ScriptedPlayer(["hi"]), RENDERER, repeat_times=2, explore_step=0, model_version=0).run()
    assert time.monotonic() - started < 10  # the stuck step is not waited for
    assert len(exps) == 1 and exps[0].info["episodes_failed"] == 1 and exps[0].reward == 2.0
    stuck = Task(task_id="slow/1", raw={}, workflow_args={"delays": [30.0], "episode_timeout_s": 1.0})
    with pytest.raises(EpisodeFailure, match=r"did not finish within 1 s .* waiting for the environment at turn 1"):
        SlowWorkflow(stuck, ScriptedPlayer(["hi"]), RENDERER, repeat_times=1, explore_step=0, model_version=0).run()


def test_q20_through_the_runner_reports_turns_and_success() -> None:
    tasks = load_taskset(TasksetConfig(name="q20", path="data/q20", split="train", default_workflow_type="q20",
                                       format={"prompt_key": "secret"}, workflow_args={"max_turns": 2}))
    assert len(tasks) == 20 and tasks[0].raw["secret"] == "dog"
    result = WorkflowRunner([ScriptedPlayer(["Is it a dog?"])], RENDERER, runner_per_model=2).run(
        tasks[:3], explore_step=1, repeat_times=2)
    stats = episode_stats(result.experiences)
    assert stats["success_rate"] == pytest.approx(2 / 6)  # only the dog is found
    assert stats["turns_mean"] == pytest.approx((1 * 2 + 2 * 4) / 6)


# -- trajectories from recorded calls -----------------------------------------------------------------


def record(prompt: list[int], response: list[int], rid: str = "r") -> CallRecord:
    time.sleep(0.001)  # calls are ordered by when they finished
    return CallRecord(rid, prompt, response, [-0.1] * len(response), "stop")


def test_calls_that_continue_each_other_become_one_trajectory_with_a_mask() -> None:
    first = record([1, 2, 3], [4, 5, EOS])
    second = record([1, 2, 3, 4, 5, EOS, 9, 9], [6, EOS])  # the conversation sent back, plus a tool result
    rewritten = record([1, 2, 7], [8, EOS])  # the agent changed its history: a trajectory of its own
    (merged, alone) = build_trajectories([second, rewritten, first])  # in any order: by when they finished
    assert merged.prompt_token_ids == [1, 2, 3]
    assert merged.response_token_ids == [4, 5, EOS, 9, 9, 6, EOS]
    assert merged.mask == [1, 1, 1, 0, 0, 1, 1]
    assert merged.logprobs == [-0.1, -0.1, -0.1, 0.0, 0.0, -0.1, -0.1]
    assert merged.calls == 2 and alone.calls == 1 and alone.mask == [1, 1]
    # a call sampled under a grammar (a forced tool call) is context: its logprobs are not the policy's
    forced = replace(record([1, 2, 3], [4, 5, EOS]), constrained=True)
    answer = record([1, 2, 3, 4, 5, EOS, 9, 9], [6, EOS])
    (t,) = build_trajectories([forced, answer])
    assert t.mask == [0, 0, 0, 0, 0, 1, 1] and t.logprobs == [0.0] * 5 + [-0.1, -0.1] and t.calls == 2


def test_a_tool_call_written_back_continues_its_sampled_tokens() -> None:
    """What the endpoint does when the agent sends its tool call back: the template re-renders the call
    (other JSON spacing, other token boundaries), the next prompt continues the exact sampled tokens."""
    renderer = renderer_for("HuggingFaceTB/SmolLM2-135M-Instruct", CHATML_TOOLS_TEMPLATE)
    chat = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": "What is 12 * 7?"}]
    first_prompt = renderer.render(chat, tools=[CALCULATOR])
    # sampled as the model did: compact JSON, split where the tokenizer would not split
    sampled = [*renderer.encode('<tool_call>\n{"name": "calcu'), *renderer.encode('lator", "arguments": '),
               *renderer.encode('{"expression":"12*7"}}\n</tool_call>'), EOS]
    first = replace(record(first_prompt, sampled), constrained=True)  # a forced call
    call = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "12*7"}'}}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "84"}
    chat2 = [*chat, {"role": "assistant", "content": "", "tool_calls": [call]}, tool]
    rendered = renderer.render(chat2, tools=[CALCULATOR])
    assert rendered[:len(first_prompt)] == first_prompt and rendered[:len(first_prompt + sampled)] != first_prompt + sampled

    spliced = continue_sampled(rendered, [first], renderer.decode_raw)
    assert spliced == first_prompt + sampled + renderer.continuation([tool], sampled, tools=[CALCULATOR])
    answer = [*renderer.encode("\\boxed{84}"), EOS]
    second = replace(record(spliced, answer), rendered_prompt_token_ids=rendered)
    # the next turn continues the second call's prompt as sampled (matched on what the template rendered)
    chat3 = [*chat2, {"role": "assistant", "content": "\\boxed{84}"}, {"role": "user", "content": "Sure?"}]
    third_prompt = continue_sampled(renderer.render(chat3, tools=[CALCULATOR]), [first, second], renderer.decode_raw)
    assert third_prompt is not None and third_prompt[:len(spliced + answer)] == spliced + answer
    third = replace(record(third_prompt, [EOS]), rendered_prompt_token_ids=renderer.render(chat3, tools=[CALCULATOR]))

    (t,) = build_trajectories([first, second, third])  # one episode, not split
    context = len(spliced) - len(first_prompt + sampled)
    assert t.prompt_token_ids == first_prompt and t.calls == 3
    assert t.response_token_ids[:len(sampled)] == sampled  # the forced call as sampled, as context
    assert t.mask[:len(sampled) + context + len(answer)] == [0] * (len(sampled) + context) + [1] * len(answer)
    assert [m for i, m in enumerate(t.mask) if i == 0 or t.mask[i - 1] != m] == [0, 1, 0, 1]

    # no splice where the agent wrote back something else, or the sampled call was cut off
    other = {**call, "function": {**call["function"], "arguments": '{"expression": "12*8"}'}}
    rewritten = renderer.render([*chat, {"role": "assistant", "content": "", "tool_calls": [other]}, tool],
                                tools=[CALCULATOR])
    assert continue_sampled(rewritten, [first], renderer.decode_raw) is None
    assert continue_sampled(rendered, [replace(first, finish_reason="length")], renderer.decode_raw) is None
    assert continue_sampled(first_prompt, [first], renderer.decode_raw) is None  # the same call again


def test_call_history_is_bounded_and_read_once() -> None:
    history = CallHistory(max_calls=3)
    for rid in ("a", "a", "b", "c"):
        history.record(record([1], [2], rid))
    assert history.dropped == 2 and history.rollout_ids() == ["b", "c"]  # the oldest rollout went first
    assert len(history.get("b")) == 1 and history.get("b") == [] and len(history) == 1


def test_rollout_id_comes_from_the_base_url_or_the_header() -> None:
    seen: list[tuple[str, str]] = []

    async def app(scope: dict, receive: Any, send: Any) -> None:
        seen.append((scope["path"], current_rollout_id.get()))

    middleware = RolloutIdMiddleware(app)
    url = rollout_base_url("http://127.0.0.1:8000/v1", "q20/train/3@1/ab12cd34/0")
    assert url == "http://127.0.0.1:8000/rollouts/q20/train/3@1/ab12cd34/0/v1"
    path = url.removeprefix("http://127.0.0.1:8000") + "/chat/completions"
    asyncio.run(middleware({"type": "http", "path": path, "headers": []}, None, None))
    asyncio.run(middleware({"type": "http", "path": "/v1/models", "headers": [(b"X-Rollout-Id", b"ep-7")]}, None, None))
    asyncio.run(middleware({"type": "http", "path": "/v1/models", "headers": []}, None, None))
    assert seen == [("/v1/chat/completions", "q20/train/3@1/ab12cd34/0"), ("/v1/models", "ep-7"), ("/v1/models", "")]
    with pytest.raises(ValueError, match="rollout id"):
        rollout_base_url("http://h/v1", "a b")


# -- the loss honours a mask with zeros in the middle ---------------------------------------------


def test_masked_tokens_in_the_middle_add_nothing_to_the_loss_or_its_gradient() -> None:
    config = load_recipe("q20")
    prompt, response = [5, 6, 7], [10, 11, 12, 13, 14, 15]
    mask = [1, 1, 0, 0, 1, 1]  # a model turn, two env tokens, a model turn
    exps = [Experience(f"e{i}", "t", "g", prompt, response, [-1.0] * 6, reward=1.0, response_mask=mask, advantage=a)
            for i, a in enumerate((1.0, -0.5))]
    batch = collate(exps, pad_token_id=0)
    assert batch.response_mask.tolist() == [[1.0, 1.0, 0.0, 0.0, 1.0, 1.0]] * 2

    def loss_and_grad(middle: float) -> tuple[float, torch.Tensor]:
        logprobs = torch.full((2, 6), -1.2)
        logprobs[:, 2:4] = middle  # whatever the policy says about env tokens
        logprobs.requires_grad_(True)
        inputs = algorithms.LossInputs(logprobs=logprobs, old_logprobs=batch.old_logprobs, advantages=batch.advantages,
                                       response_mask=batch.response_mask)
        loss, _ = algorithms.compute_loss(config.algorithm, inputs)
        loss.backward()
        return float(loss.detach()), logprobs.grad

    loss_a, grad_a = loss_and_grad(-0.1)
    loss_b, grad_b = loss_and_grad(-30.0)
    assert loss_a == pytest.approx(loss_b)
    assert torch.equal(grad_a[:, 2:4], torch.zeros(2, 2)) and torch.equal(grad_b[:, 2:4], torch.zeros(2, 2))
    assert grad_a[:, [0, 1, 4, 5]].abs().min() > 0


# -- tools, rules ----------------------------------------------------------------------------------


def test_calculator_evaluates_arithmetic_only() -> None:
    assert calculate("(12 + 7) * 3") == 57 and calculate("1,000 / 4") == 250
    for bad in ("__import__('os')", "2 ** 100", "1/0", "x"):
        with pytest.raises(ValueError):
            calculate(bad)


def _config(**overrides: Any) -> ExperimentConfig:
    return load_recipe("gsm8k").with_overrides(overrides)


@pytest.mark.parametrize(("overrides", "path", "message"), [
    ({"explorer.rollout_model.enable_history": True}, "explorer.rollout_model.enable_history", "enable_openai_api"),
    ({"explorer.rollout_model.enable_openai_api": True, "explorer.rollout_model.enable_auto_tool_choice": True},
     "explorer.rollout_model.tool_call_parser", "required"),
    ({"explorer.auxiliary_models": [{"model_path": "x"}, {"model_path": "y/x"}]}, "explorer.auxiliary_models",
     "share a name"),
    ({"algorithm.algorithm_type": "on_policy_distill"}, "explorer.auxiliary_models", "teacher"),
    ({"mode": "serve", "explorer.rollout_model.enable_openai_api": False}, "explorer.rollout_model.enable_openai_api",
     "serve"),
])
def test_endpoint_rules(overrides: dict, path: str, message: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as info:
        _config(**overrides)
    assert path in str(info.value) and message in str(info.value)


def test_serve_mode_turns_the_endpoint_on_and_recipes_validate() -> None:
    served = _config(mode="serve")
    assert served.explorer.rollout_model.enable_openai_api
    assert "explorer.rollout_model.enable_openai_api" in served.derived
    tools = load_recipe("gsm8k-tools").explorer.rollout_model
    assert tools.enable_openai_api and tools.enable_history and tools.tool_call_parser == "hermes"
    assert load_recipe("serve").mode == "serve"
    assert load_recipe("q20").buffer.explorer_input.taskset.default_workflow_type == "q20"
    warned = _config(**{"explorer.rollout_model.tool_call_parser": "hermes"})
    assert any("enable_openai_api" in w for w in warned.warnings)


def test_runner_threads_can_share_the_history_lock() -> None:
    history = CallHistory()
    threads = [threading.Thread(target=lambda i=i: [history.record(record([i], [i], str(i % 3))) for _ in range(20)])
               for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(history) == 120 and sum(len(history.get(r)) for r in ("0", "1", "2")) == 120
