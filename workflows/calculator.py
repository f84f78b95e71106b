"""`math_calculator_workflow`: math_workflow with a calculator in the loop, GSM8K's own convention.

GSM8K's solutions carry calculator annotations (`48/2 = <<48/2=24>>24`) because its authors sampled with a
calculator: wherever the model writes "=", the expression before it is computed and its value written for the
model. A 135M model gets 46 % of its worked equations wrong (the gsm8k warm-up's greedy answers on `test[:400]`),
so without one the reasoning it does get right is lost to arithmetic.

Sampling stops at each "=" token; when the text before it ends in arithmetic (workflows/worked_steps.py reads
it), the value is appended (" 24", or " $24" after money) and sampling goes on from the exact tokens, until the
response's token budget is spent or the model ends. The appended tokens are context: `response_mask` 0 and
logprob 0, so training teaches the reasoning and the calculator's answers are never targets. Scoring is
math_workflow's, on the whole text; `info["calculator_calls"]` counts the values written.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cache
from typing import Any

from backends.rollout import Sample, SamplingSettings
from buffer.experience import Experience
from workflows.base import register_workflow
from workflows.math_workflow import MathWorkflow
from workflows.render import ChatRenderer, Messages
from workflows.worked_steps import left_side, value_of


@dataclass
class CalculatedSample(Sample):
    """A sample whose response holds the calculator's values: `response_mask` 0 on their tokens."""

    response_mask: list[int] = field(default_factory=list)
    calls: int = 0


@register_workflow("math_calculator_workflow")
class MathCalculatorWorkflow(MathWorkflow):
    """math_workflow, sampled with a calculator that writes the value after each "=" (module docstring)."""

    def sample(self, messages: Messages | str, settings: SamplingSettings | None = None) -> list[Sample]:
        settings = settings or self.sampling_settings()
        stops = equals_tokens(self.renderer)
        settings = replace(settings, stop_token_ids=(*settings.stop_token_ids, *stops))
        budget = settings.max_tokens
        states = [CalculatedSample(s.prompt_token_ids, list(s.response_token_ids), list(s.logprobs), s.finish_reason,
                                   response_mask=[1] * len(s.response_token_ids))
                  for s in super().sample(messages, settings)]
        live = [s for s in states if self._calculate(s, stops, budget)]
        # Each sample goes on at its own pace: one waiting for the slowest of its group would hold the engine's
        # batch to a few sequences.
        with ThreadPoolExecutor(max(len(live), 1), thread_name_prefix="calculator") as pool:
            list(pool.map(lambda state: self._go_on(state, settings, stops, budget), live))
        return self.renderer.with_text(states)  # built without text: decoded here, the written values with it

    def _go_on(self, state: CalculatedSample, settings: SamplingSettings, stops: tuple[int, ...], budget: int) -> None:
        """Sample on from the state's exact tokens, writing a value at each "=", until it ends or its budget is spent."""
        while True:
            # The length asked for is the budget's power-of-two share that covers the rest: a runner merging calls
            # of equal settings (an engine that does not batch calls itself) then merges these.
            room = budget - len(state.response_token_ids)
            ((out,),) = self.engine.generate([[*state.prompt_token_ids, *state.response_token_ids]],
                                             replace(settings, n=1, max_tokens=_covering(room, budget)))
            tokens = out.response_token_ids[:room]
            state.response_token_ids += tokens
            state.logprobs += out.logprobs[:room]
            state.response_mask += [1] * len(tokens)
            state.finish_reason = out.finish_reason if len(out.response_token_ids) <= room else "length"
            if not self._calculate(state, stops, budget):
                return

    def _calculate(self, state: CalculatedSample, stops: tuple[int, ...], budget: int) -> bool:
        """Append the value after a final "=" token; whether sampling goes on."""
        if len(state.response_token_ids) >= budget or not state.response_token_ids or state.response_token_ids[-1] not in stops:
            return False
        text = self.renderer.decode(state.response_token_ids)
        expression = left_side(text, text.rindex("="))
        value = value_of(expression)
        if value is not None:
            written = self.renderer.encode(" " + ("$" if "$" in expression else "") + _number(value))
            state.response_token_ids += written
            state.logprobs += [0.0] * len(written)
            state.response_mask += [0] * len(written)
            state.calls += 1
        return len(state.response_token_ids) < budget

    def make_experience(self, sample: Sample, index: int | str, reward: float,
                        breakdown: dict[str, float] | None = None, prompt_text: str = "",
                        info: dict[str, Any] | None = None) -> Experience:
        exp = super().make_experience(sample, index, reward, breakdown, prompt_text, info)
        if isinstance(sample, CalculatedSample):
            exp.response_mask = list(sample.response_mask)
            exp.info["calculator_calls"] = sample.calls
        return exp


@cache
def _equals_tokens(vocab_size: int, renderer: ChatRenderer) -> tuple[int, ...]:
    return tuple(i for i in range(vocab_size) if renderer.decode([i]).strip() == "=")


def equals_tokens(renderer: ChatRenderer) -> tuple[int, ...]:
    """The tokens that write a bare "=" (SmolLM2: "=" and " ="), where the calculator steps in."""
    return _equals_tokens(len(renderer.tokenizer), renderer)


def _covering(room: int, budget: int) -> int:
    """The smallest of budget, budget/2, budget/4, ... (at least 16 tokens) that is ≥ room."""
    length = budget
    while length // 2 >= max(room, 16):
        length //= 2
    return length


def _number(value: Fraction) -> str:
    """A whole value as it is; another to two decimals (10 / 3 → 3.33), trailing zeros dropped."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.2f}".rstrip("0").rstrip(".")
