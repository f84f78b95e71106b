"""math_calculator_workflow (workflows/calculator.py): sampling stops at each "=", the calculator writes the value,
sampling goes on from the exact tokens; the written values are context (mask 0), scored with the rest.

The engine is a stand-in behind `RolloutEngine` that writes a script chunk by chunk, stopping where the real
engine would (at a stop token id); the tokenizer is SmolLM2's own."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from backends.rollout import Sample, SamplingSettings, TokenIds
from buffer.experience import Experience
from buffer.taskset import Task, load_taskset
from deployments import load_recipe
from tests.stand_in_engine import StandInEngine
from tests.test_taskset import taskset_config
from workflows import get_workflow
from workflows.calculator import equals_tokens
from workflows.render import renderer_for

RENDERER = renderer_for("HuggingFaceTB/SmolLM2-135M-Instruct")
# The model's own words; where it writes "=" the calculator writes the value (its own, wrong "25" never comes).
SCRIPT = "She sold 48/2 = 25 clips in May, so x = 2 and 48 + 24 = 71 in all."


class ScriptWriter(StandInEngine):
    """Writes SCRIPT's tokens after what the response already holds (found by counting the "=" in it), up to and
    with the first stop token id, as vLLM does; a value the calculator wrote replaces the script's own."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, SamplingSettings]] = []
        self.prompt_length: int | None = None  # the first call's prompt is the task's

    def generate(self, prompts: list[TokenIds], sampling: SamplingSettings) -> list[list[Sample]]:
        self.calls.append((len(prompts), sampling))
        self.prompt_length = self.prompt_length or len(prompts[0])
        pieces = SCRIPT.split("=")
        out = []
        for ids in prompts:
            done = RENDERER.decode(ids[self.prompt_length:])
            rest = pieces[done.count("=")]
            if done.split("=")[-1].strip():  # the calculator wrote a value: the model goes on after it
                rest = re.sub(r"^ \$?\d+", "", rest)
            if not sampling.stop_token_ids:
                rest = "=".join([rest, *pieces[done.count("=") + 1:]])
            tokens = RENDERER.encode(rest + ("=" if sampling.stop_token_ids and done.count("=") + 1 < len(pieces) else ""))
            stop = next((i + 1 for i, t in enumerate(tokens) if t in sampling.stop_token_ids), len(tokens))
            reason = "stop" if stop <= sampling.max_tokens else "length"
            tokens = tokens[: min(stop, sampling.max_tokens)]
            out.append([Sample(list(ids), tokens, [-0.5] * len(tokens), reason) for _ in range(sampling.n)])
        return out


def natalia() -> Task:
    return load_taskset(taskset_config(split="train[:1]"))[0]  # 48/2 = 24 clips in May, 72 in all


def run(workflow: str, max_tokens: int = 128, repeat_times: int = 2) -> tuple[list[Experience], ScriptWriter]:
    engine = ScriptWriter()
    exps = get_workflow(workflow)(natalia(), engine, RENDERER, repeat_times=repeat_times, explore_step=1,
                                  model_version=0, max_tokens=max_tokens).run()
    return exps, engine


def test_the_calculator_writes_each_value_and_training_skips_it() -> None:
    exps, engine = run("math_calculator_workflow")
    for exp in exps:
        assert exp.response_text == "She sold 48/2 = 24 clips in May, so x = 2 and 48 + 24 = 72 in all."
        assert exp.reward_breakdown["lenient"] == 1.0 and exp.info["calculator_calls"] == 2
        written = "".join(RENDERER.decode([t]) for t, m in zip(exp.response_token_ids, exp.response_mask, strict=True)
                          if m == 0)
        assert written == " 24 72"  # "x = 2" is no arithmetic: the model's own 2, trained
        assert all(lp == 0.0 for lp, m in zip(exp.logprobs, exp.response_mask, strict=True) if m == 0)
        assert all(lp == -0.5 for lp, m in zip(exp.logprobs, exp.response_mask, strict=True) if m == 1)
    first, *continued = engine.calls
    assert first[1].n == 2 and set(equals_tokens(RENDERER)) <= set(first[1].stop_token_ids)
    # Each sample goes on alone, at its own pace: one call per sample after each of its 3 "=".
    assert len(continued) == 2 * 3 and all(settings.n == 1 and count == 1 for count, settings in continued)


def test_without_the_calculator_the_models_own_arithmetic_is_scored() -> None:
    (exp,), _ = run("math_workflow", repeat_times=1)
    assert exp.response_text == SCRIPT and exp.reward_breakdown["lenient"] == 0.0 and set(exp.response_mask) == {1}


def test_the_response_keeps_its_token_budget() -> None:
    exps, _ = run("math_calculator_workflow", max_tokens=12)
    assert all(len(exp.response_token_ids) <= 12 and exp.info["finish_reason"] == "length" for exp in exps)
    assert set(equals_tokens(RENDERER)) == {RENDERER.encode("=")[0], RENDERER.encode("a =")[1]}


def test_the_gsm8k_recipe_samples_with_the_calculator_which_takes_no_workflow_args() -> None:
    config = load_recipe("gsm8k")
    assert config.buffer.explorer_input.taskset.default_workflow_type == "math_calculator_workflow"
    with pytest.raises(ValidationError, match="math_workflow takes no workflow_args") as info:
        config.with_overrides({"buffer.explorer_input.taskset.workflow_args": {"max_turns": 3}})
    assert "buffer.explorer_input.taskset.workflow_args" in str(info.value)
