"""`math_workflow`: GSM8K-style math problems, scored with math-verify.

Reward = accuracy (1.0 when the final answer equals the gold answer, checked by math-verify) +
format_bonus (`format_score`, default 0.1, when the response puts an answer in \\boxed{}). The gold
answer is the text after the last `####` of the response_key column (GSM8K's convention), or the whole
column when there is none.

`Experience.reward_breakdown` holds the two reward parts and three 0/1 measures that evaluation
averages (tasks/evaluate.py), whatever the reward rewards:
  strict    the answer is in \\boxed{} and correct (the form the prompt asks for)
  lenient   the answer is correct: the \\boxed{} one, else the last number/expression of the response
  format    there is an answer in \\boxed{}
`accuracy` is `strict` when require_boxed is set, else `lenient`.

Prompt: a system message (the row's format.system_prompt_key column, else format.system_prompt, else
DEFAULT_SYSTEM_PROMPT below; "" for none) and the format.prompt_key column as the user message. With
format.base_model_prompt, the same two as plain text without the chat template, in the layout of Trinity's
math_boxed_workflow with use_base: "System:" + system prompt + "\nUser:\n" + prompt + "\nAssistant:\n"
("User:\n" + prompt + "\nAssistant:\n" without a system prompt).

reward_fn_args of the taskset:
  format_score (float, default 0.1)    the bonus for a \\boxed{} answer
  require_boxed (bool, default False)  when True, an answer outside \\boxed{} scores no accuracy;
                                       when False the last number/expression of the response counts
  think_penalty (float, default 0)     subtracted from a response without one <think>...</think> (in that
                                       order): Trinity's math_boxed_workflow with with_think, whose
                                       format_score_coef it is (`think_penalty` in the breakdown)
  step_penalty (float, default 0)      subtracted in proportion to the share of the response's worked
                                       equations `expression = result` that are wrong (`step_penalty` in the breakdown;
                                       workflows/worked_steps.py): a signal inside answers that end alike
  step_token_reward (float, default 0) a process reward on the tokens of each worked equation's result: +
                                       when right, − when wrong, added to those tokens' advantage
                                       (Experience.token_rewards): credit for the one wrong fact, not the answer
  With either, `wrong_steps` in the breakdown is the share of the answer's worked equations that are wrong
  (explore/wrong_steps in the run's metrics).

The taskset's default_reward_fn_type picks among Trinity's reward functions this scoring stands for:
  math_boxed_reward (or none)  the reward above
  math_reward                  the same (its <think>/<answer> format bonus is not given; validation warns)
  accuracy_reward              accuracy only (math-verify, the boxed answer first), no format bonus
  math_dapo_reward             DAPO's: accuracy of the \\boxed{} answer (1 or 0) + the overlong penalty, whose
                               reward_fn_args are Trinity's: enable_overlong_penalty (default False),
                               penalty_factor, cache_length, max_response_length (default: the rollout's
                               max_tokens). With L = max_response_length and C = cache_length, a response of
                               n tokens gets 0 up to L − C, then (L − C − n) / C × penalty_factor, and
                               −penalty_factor beyond L (`overlong_penalty`).
  countdown_reward             Trinity's countdown score: the response's last <answer> equation must use the
                               gold column's numbers once each and equal its target (workflows/countdown.py)
  reasoning_gym_reward         reasoning-gym's own verifier of the row's dataset (rows of generator:reasoning_gym):
                               the last <answer> (or, with reward_fn_args.answer_format boxed, the last \\boxed{})
                               scored by dataset.score_answer; the default system prompt asks for that form
                               (workflows/reasoning_gym.py)
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from math_verify import parse, verify

from buffer.experience import Experience
from schemas.rewards import MATH_WORKFLOW_REWARD_FNS, dapo_overlong_args, step_arg
from schemas.rewards import reasoning_gym_answer_format as answer_format
from workflows.answers import last_boxed
from workflows.base import Workflow, register_workflow
from workflows.countdown import COUNTDOWN_FORMAT_SCORE, countdown_truth, score_countdown
from workflows.reasoning_gym import SYSTEM_PROMPTS as REASONING_GYM_PROMPTS
from workflows.reasoning_gym import score_reasoning_gym
from workflows.render import Messages
from workflows.worked_steps import step_token_rewards, wrong_share

# Used when the taskset's format.system_prompt is None.
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Solve the math problem step by step. "
    "Put the final answer, a number only, in \\boxed{}, e.g. \\boxed{42}."
)
DEFAULT_FORMAT_SCORE = 0.1
_MAX_ANSWER_CHARS = 200  # bounds math-verify's work in runner threads, where it cannot time out
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# In runner threads math-verify cannot time out (see _timeout_s) and warns so on every call; the answer
# is cut to _MAX_ANSWER_CHARS instead.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def gold_answer(solution: str) -> str:
    """The final answer of a GSM8K solution ("... #### 1,234" → "1234")."""
    answer = solution.rsplit("####", 1)[-1] if "####" in solution else solution
    return _THOUSANDS_COMMA.sub("", answer.strip())


def _timeout_s() -> int | None:
    # math-verify times out with signal.alarm, which only works in the main thread.
    return 5 if threading.current_thread() is threading.main_thread() else None


def score_math(
    response: str,
    gold: str,
    *,
    format_score: float = DEFAULT_FORMAT_SCORE,
    require_boxed: bool = False,
) -> dict[str, float]:
    """Reward breakdown of one response against the gold final answer: the reward's parts
    {"accuracy", "format_bonus"} and the measures {"strict", "lenient", "format"} (module docstring)."""
    boxed = last_boxed(response)
    timeout = _timeout_s()
    if boxed is not None:
        candidate = f"\\boxed{{{_THOUSANDS_COMMA.sub('', boxed)[:_MAX_ANSWER_CHARS]}}}"
    else:
        candidate = _THOUSANDS_COMMA.sub("", response)[-_MAX_ANSWER_CHARS:]
    correct = False
    if candidate.strip():
        predicted = parse(candidate, parsing_timeout=timeout)
        expected = parse(gold, parsing_timeout=timeout)
        correct = bool(predicted and expected and verify(expected, predicted, timeout_seconds=timeout))
    strict = correct and boxed is not None
    return {
        "accuracy": 1.0 if (strict if require_boxed else correct) else 0.0,
        "format_bonus": format_score if boxed is not None else 0.0,
        "strict": 1.0 if strict else 0.0,
        "lenient": 1.0 if correct else 0.0,
        "format": 1.0 if boxed is not None else 0.0,
    }


def math_reward(breakdown: dict[str, float]) -> float:
    """The reward of a score_math breakdown: accuracy + the format bonus (+ DAPO's overlong penalty, + the
    missing-<think> penalty, + the wrong worked steps' penalty)."""
    return (breakdown["accuracy"] + breakdown["format_bonus"] + breakdown.get("overlong_penalty", 0.0)
            + breakdown.get("think_penalty", 0.0) + breakdown.get("step_penalty", 0.0))


def prompt_text(prompt: Messages | str) -> str:
    """What an experience records as its prompt: the plain text, or the chat's last (user) message."""
    return prompt if isinstance(prompt, str) else prompt[-1]["content"]


def thinks(response: str) -> bool:
    """One <think>...</think>, opened before it is closed (Trinity's validate_think_pattern)."""
    return response.count("<think>") == 1 and response.count("</think>") == 1 and (
        response.index("<think>") < response.index("</think>"))


def overlong_penalty(length: int, max_length: int, cache_length: int, penalty_factor: float) -> float:
    """DAPO's soft overlong punishment of a response of `length` tokens: 0 up to max_length − cache_length,
    then falling linearly to −penalty_factor at max_length, and −penalty_factor beyond it."""
    expected = max_length - cache_length
    if length <= expected:
        return 0.0
    if length > max_length:
        return -penalty_factor
    return (expected - length) / cache_length * penalty_factor



@register_workflow("math_workflow")
class MathWorkflow(Workflow):
    """Prompt = system prompt + the problem; reward = math-verify accuracy + a format bonus."""

    @classmethod
    def required_keys(cls, fmt: Any) -> list[str]:
        return [*super().required_keys(fmt), fmt.response_key]

    def system_prompt(self) -> str:
        """The row's system_prompt_key column, else format.system_prompt, else the default (reasoning_gym_reward's:
        reasoning-gym's, asking for the answer in the form its answer_format reads)."""
        fmt = self.task.format
        key = getattr(fmt, "system_prompt_key", None)
        if key and self.task.raw.get(key) is not None:
            return str(self.task.raw[key])
        if fmt.system_prompt is not None:
            return fmt.system_prompt
        if self.task.reward_fn_type == "reasoning_gym_reward":
            return REASONING_GYM_PROMPTS[answer_format(self.task.reward_fn_args or {})]
        return DEFAULT_SYSTEM_PROMPT

    def messages(self) -> Messages:
        """System prompt + the prompt_key column (a string, or already a list of chat messages)."""
        system = self.system_prompt()
        prompt = self.task.raw[self.task.format.prompt_key]
        if isinstance(prompt, list):
            chat = [dict(m) for m in prompt]
            if chat and chat[0].get("role") == "system":
                return chat
        else:
            chat = [{"role": "user", "content": str(prompt)}]
        return [{"role": "system", "content": system}, *chat] if system else chat

    def prompt(self) -> Messages | str:
        """What is sent: the chat of `messages()`, or with format.base_model_prompt the plain text (module docstring)."""
        fmt = self.task.format
        if not fmt.base_model_prompt:
            return self.messages()
        problem = self.task.raw[fmt.prompt_key]
        if isinstance(problem, list):
            raise ValueError(f"task {self.task.task_id}: format.base_model_prompt writes the prompt_key column "
                             f"'{fmt.prompt_key}' as plain text, but it holds a list of chat messages")
        system = self.system_prompt()
        return (f"System:{system}\n" if system else "") + f"User:\n{problem}\nAssistant:\n"

    def run(self) -> list[Experience]:
        if self.task.reward_fn_type not in (None, *MATH_WORKFLOW_REWARD_FNS):
            raise ValueError(f"task {self.task.task_id}: math_workflow scores with its own reward; reward_fn_type "
                             f"{self.task.reward_fn_type!r} is not one of {MATH_WORKFLOW_REWARD_FNS}")
        fmt = self.task.format
        if self.task.raw.get(fmt.response_key) is None:
            raise KeyError(
                f"task {self.task.task_id}: response_key '{fmt.response_key}' (the gold answer) "
                f"missing; row keys: {sorted(self.task.raw)}"
            )
        args = self.task.reward_fn_args or {}
        kind = self.task.reward_fn_type
        if kind == "countdown_reward":
            return self._countdown(args)
        if kind == "reasoning_gym_reward":
            return self._reasoning_gym(args)
        gold = gold_answer(str(self.task.raw[fmt.response_key]))
        format_score = 0.0 if kind in ("accuracy_reward", "math_dapo_reward") else float(
            args.get("format_score", DEFAULT_FORMAT_SCORE))
        require_boxed = kind == "math_dapo_reward" or bool(args.get("require_boxed", False))
        overlong = dapo_overlong_args(args, self.sampling_settings().max_tokens) if kind == "math_dapo_reward" else None
        think_penalty = float(args.get("think_penalty", 0.0))
        steps = step_arg(args, "step_penalty", kind)
        token_reward = step_arg(args, "step_token_reward", kind)

        prompt = self.prompt()
        experiences = []
        for index, sample in enumerate(self.sample(prompt)):
            breakdown = score_math(
                sample.text, gold, format_score=format_score, require_boxed=require_boxed
            )
            if overlong is not None:
                breakdown["overlong_penalty"] = overlong_penalty(len(sample.response_token_ids), *overlong)
            if think_penalty:
                breakdown["think_penalty"] = 0.0 if thinks(sample.text) else -think_penalty
            if steps or token_reward:  # a measure: the share of the answer's worked equations that are wrong
                breakdown["wrong_steps"] = wrong_share(sample.text)
            if steps:
                breakdown["step_penalty"] = -steps * breakdown["wrong_steps"]
            exp = self.make_experience(sample, index, reward=math_reward(breakdown), breakdown=breakdown,
                                       prompt_text=prompt_text(prompt), info={"gold": gold})
            if token_reward:
                exp.token_rewards = step_token_rewards(exp.response_token_ids, self.renderer.decode, token_reward)
            experiences.append(exp)
        return experiences

    def _reasoning_gym(self, args: dict[str, Any]) -> list[Experience]:
        """reasoning-gym's verifier of the row's dataset; the row's `reasoning_gym` column names the entry."""
        if self.task.raw.get("reasoning_gym") is None:
            raise KeyError(f"task {self.task.task_id}: reasoning_gym_reward reads the 'reasoning_gym' column (rows of "
                           f"generator:reasoning_gym); row keys: {sorted(self.task.raw)}")
        source, fmt = str(self.task.raw["reasoning_gym"]), answer_format(args)
        question = self.task.raw.get("question")
        prompt = self.prompt()
        return [
            self.make_experience(sample, index, reward=math_reward(breakdown), breakdown=breakdown,
                                 prompt_text=prompt_text(prompt), info={"gold": str(self.task.raw.get("answer"))})
            for index, sample in enumerate(self.sample(prompt))
            for breakdown in [score_reasoning_gym(sample.text, source, question, fmt)]
        ]

    def _countdown(self, args: dict[str, Any]) -> list[Experience]:
        """Trinity's countdown_reward: the gold column is {"target", "numbers"} (workflows/countdown.py)."""
        key = self.task.format.response_key
        target, numbers = countdown_truth(self.task.raw[key], self.task.task_id, key)
        format_score = float(args.get("format_score", COUNTDOWN_FORMAT_SCORE))
        prompt = self.prompt()
        return [
            self.make_experience(sample, index, reward=math_reward(breakdown), breakdown=breakdown,
                                 prompt_text=prompt_text(prompt),
                                 info={"gold": str(self.task.raw[key])})
            for index, sample in enumerate(self.sample(prompt))
            for breakdown in [score_countdown(sample.text, target, numbers, format_score)]
        ]
