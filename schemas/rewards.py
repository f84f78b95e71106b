"""Arguments of the reward functions workflows score with (Trinity's names), checked at validation
(schemas/rules.py) and read by the workflows (workflows/math_workflow.py) with the same function."""

from __future__ import annotations

from typing import Any

# Trinity's reward functions math_workflow scores with (a taskset's default_reward_fn_type; the workflow's
# docstring says how each scores).
MATH_WORKFLOW_REWARD_FNS = ("math_boxed_reward", "math_reward", "accuracy_reward", "math_dapo_reward", "countdown_reward",
                            "reasoning_gym_reward")


class RewardArgsError(ValueError):
    """A reward_fn_args entry that is missing or wrong: `key` names it (below reward_fn_args)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"reward_fn_args.{key}: {message}")
        self.key, self.message = key, message


def dapo_overlong_args(args: dict[str, Any], max_tokens: int | None) -> tuple[int, int, float] | None:
    """(max_response_length, cache_length, penalty_factor) of math_dapo_reward's reward_fn_args when
    enable_overlong_penalty is on (Trinity's names), else None. max_response_length defaults to the
    rollout's max_tokens."""
    if not args.get("enable_overlong_penalty"):
        return None
    max_length = args.get("max_response_length", max_tokens)
    for key, value in (("penalty_factor", args.get("penalty_factor")), ("cache_length", args.get("cache_length")),
                       ("max_response_length", max_length)):
        if value is None:
            raise RewardArgsError(key, "math_dapo_reward's enable_overlong_penalty needs penalty_factor, cache_length "
                                       "and max_response_length (default: the rollout's max_tokens)")
    max_length, cache = _number(max_length, "max_response_length", int), _number(args["cache_length"], "cache_length", int)
    if not 0 < cache < max_length:
        raise RewardArgsError("cache_length", f"{cache} must be > 0 and below max_response_length ({max_length})")
    return max_length, cache, _number(args["penalty_factor"], "penalty_factor", float)


# reasoning_gym_reward's reward_fn_args.answer_format: where its answer is (workflows/reasoning_gym.py).
REASONING_GYM_ANSWER_FORMATS = ("answer_tag", "boxed")


def reasoning_gym_answer_format(args: dict[str, Any]) -> str:
    """reasoning_gym_reward's reward_fn_args.answer_format (default answer_tag: the last <answer>; boxed: the last
    \\boxed{}), or a RewardArgsError naming it."""
    value = args.get("answer_format", "answer_tag")
    if value not in REASONING_GYM_ANSWER_FORMATS:
        raise RewardArgsError("answer_format", f"{value!r} is not one of {', '.join(REASONING_GYM_ANSWER_FORMATS)}")
    return value


# math_workflow's checks of the worked steps (workflows/worked_steps.py), each a number ≥ 0 and why:
#   step_penalty       what an answer loses when all of its worked equations are wrong, in proportion to the wrong share
#   step_token_reward  a process reward on the tokens of each equation's result, + when it is right, − when wrong
STEP_ARGS = {"step_penalty": "it is subtracted", "step_token_reward": "right steps get +, wrong ones −"}


def step_arg(args: dict[str, Any], key: str, reward_fn_type: str | None) -> float:
    """reward_fn_args[key] (one of STEP_ARGS; default 0) as a number ≥ 0; countdown_reward, whose answer is one
    equation it scores itself, takes none."""
    value = _number(args.get(key, 0.0), key, float)
    if value < 0:
        raise RewardArgsError(key, f"{value} must be ≥ 0: {STEP_ARGS[key]}")
    if value and reward_fn_type == "countdown_reward":
        raise RewardArgsError(key, "countdown_reward scores its one <answer> equation itself; remove it")
    return value


def _number(value: Any, key: str, kind: type[int] | type[float]) -> Any:
    """value as an int or float, or a RewardArgsError naming key (a YAML list, mapping or word is no number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise RewardArgsError(key, f"{value!r} is not a number")
    try:
        number = float(value)
    except ValueError:
        raise RewardArgsError(key, f"{value!r} is not a number") from None
    if kind is int and not number.is_integer():
        raise RewardArgsError(key, f"{value!r} is not a whole number")
    return kind(number)
