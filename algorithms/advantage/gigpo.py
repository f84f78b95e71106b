"""``gigpo``: Group-in-Group Policy Optimization (Feng et al. 2025, arXiv 2505.10978; Trinity-RFT's
GiGPOAdvantageFn): step-wise credit for multi-turn episodes, without a critic.

For the episodes of one task's group (one experience per episode here, workflows/multi_turn.py):

1. episode level: each episode's return R (the sum of its step rewards, = the experience's reward) is
   normalised within the group, ``A_E = (R − mean) / (F + ε)``;
2. step level: the steps of the group's episodes that acted in the same environment state (an *anchor state*,
   ``info["step_states"]``) form a step group; each step's discounted return from that step on,
   ``R_t = Σ_{k≥t} γ^{k−t} r_k``, is normalised within its step group, ``A_S = (R_t − mean) / (F + ε)``; a step
   whose state no other step of the group saw has ``A_S = 0``;
3. every token of model turn t gets ``A_E + ω · A_S(t)`` (``Experience.token_advantages``; the environment's
   tokens, masked out of the loss, get 0).

``F`` is the std of the (step) group with ``fnorm: std``, else 1 (Trinity's default ``none``); a group of one
episode keeps its return (mean 0, F 1), as GRPO does here. The step rewards r_t are the episode's
``info["turn_rewards"]``, and its final and group rewards (the experience's reward minus their sum) count on
its last step, so the discounted return of the first step with γ = 1 is the episode's return.

Unlike Trinity, whose step experiences are bucketed by state over the whole batch, a step group is made of
the steps of one task's group (the paper's anchor-state grouping: same task, same state).

Validation refuses ``gigpo`` with a workflow that records no step states (``STEP_STATE_WORKFLOWS``;
schemas/rules.py), and ``gigpo_advantages`` refuses an experience without them, naming the field.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import Field

from algorithms.advantage.base import register_advantage_fn
from algorithms.registry import Args


class Experience(Protocol):
    """What GiGPO reads and writes of an episode's experience (buffer.experience.Experience, a layer above)."""

    eid: str
    task_id: str
    group_id: str
    reward: float | None
    advantage: float | None
    response_token_ids: list[int]
    token_advantages: list[float] | None
    info: dict[str, Any]

# The registered workflows whose environment names its state before each model turn (Env.state), i.e. whose
# experiences carry `step_states` and `turn_spans` (tests/test_gigpo.py checks it against the workflows).
STEP_STATE_WORKFLOWS = frozenset({"frozenlake", "sudoku", "sciworld", "textworld"})


class GiGPOArgs(Args):
    """Episode-level plus anchor-state step-level group advantages: A = A_E + ω · A_S."""

    omega: float = Field(1.0, ge=0, description="Weight of the step-level (anchor state) advantage.")
    gamma: float = Field(1.0, ge=0, le=1, description="Discount of the steps' returns.")
    fnorm: Literal["std", "none"] = Field(
        "none", description="Divide by the (step) group's std (std, GRPO's), or by 1 (none, Trinity's default).")
    epsilon: float = Field(1e-6, gt=0, description="Added to the denominator.")
    step_reward_key: str = Field(
        "turn_rewards", description="The experience info key of the list of each step's reward (Trinity's "
        "'step_reward' is imported as turn_rewards).")
    env_state_hash_key: str = Field(
        "step_states", description="The experience info key of the list of the state each step acted in "
        "(Trinity's 'env_state_hash' is imported as step_states).")


@register_advantage_fn("gigpo", GiGPOArgs, needs={"groups", "steps"})
def gigpo(rewards: Any, group_ids: list[str], response_mask: Any, args: dict[str, Any]) -> Any:
    raise ValueError("algorithm.advantage_fn 'gigpo' needs each episode's steps (info step_states, turn_rewards, "
                     "turn_spans): algorithms.advantage.gigpo.gigpo_advantages computes it, not the reward path")


def discounted_returns(rewards: list[float], gamma: float) -> list[float]:
    """R_t = Σ_{k≥t} γ^{k−t} r_k."""
    out, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def normalise(values: list[float], fnorm: str, epsilon: float) -> list[float]:
    """(x − mean) / (F + ε) over `values`; one value: mean 0 and F 1."""
    if len(values) == 1:
        return [values[0] / (1.0 + epsilon)]
    mean = sum(values) / len(values)
    scale = 1.0
    if fnorm == "std":  # the sample std, as torch.std (and GRPO here)
        scale = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return [(v - mean) / (scale + epsilon) for v in values]


def episode_steps(exp: Experience, args: dict[str, Any]) -> tuple[list[float], list[str], list[list[int]]]:
    """One episode's step rewards (the final and group rewards on its last step), states and turn spans."""
    info = exp.info or {}
    reward_key, state_key = args["step_reward_key"], args["env_state_hash_key"]
    spans = info.get("turn_spans")
    if spans is None or (state_key not in info and spans):
        missing = "turn_spans" if spans is None else state_key
        raise ValueError(f"advantage_fn 'gigpo': experience {exp.eid} (task {exp.task_id}) has no info[{missing!r}]: "
                         "GiGPO groups the steps of multi-turn episodes by the state each acted in; its workflow "
                         f"must record it (workflows that do: {sorted(STEP_STATE_WORKFLOWS)})")
    states = [str(s) for s in info.get(state_key, [])]
    steps = [float(r) for r in info.get(reward_key, [0.0] * len(spans))]
    if not (len(states) == len(spans) == len(steps)):
        raise ValueError(f"advantage_fn 'gigpo': experience {exp.eid}: {len(states)} {state_key}, {len(spans)} "
                         f"turn_spans and {len(steps)} {reward_key}: one of each per model turn")
    if steps:
        steps[-1] += float(exp.reward) - sum(steps)  # the env's final reward and the group reward: the last step's
    return steps, states, spans


def gigpo_advantages(experiences: list[Experience], args: dict[str, Any]) -> dict[str, float]:
    """Fill each experience's `token_advantages` (A_E + ω·A_S of its turn on each model-turn token, 0 elsewhere)
    and `advantage` (A_E); record `info["gigpo"]` (A_E, each step's A_S and the size of its step group). Returns
    metrics: step groups, the share with more than one step, mean |A_E| and |A_S|."""
    omega, gamma = float(args["omega"]), float(args["gamma"])
    fnorm, eps = str(args["fnorm"]), float(args["epsilon"])
    groups: dict[str, list[int]] = {}
    for i, exp in enumerate(experiences):
        groups.setdefault(exp.group_id, []).append(i)
    parsed = [episode_steps(exp, args) for exp in experiences]
    a_e = [0.0] * len(experiences)
    a_s: list[list[float]] = [[0.0] * len(steps) for steps, _, _ in parsed]
    sizes: list[list[int]] = [[1] * len(steps) for steps, _, _ in parsed]
    total = shared = 0
    for rows in groups.values():
        for row, score in zip(rows, normalise([float(experiences[r].reward) for r in rows], fnorm, eps), strict=True):
            a_e[row] = score
        anchors: dict[str, list[tuple[int, int, float]]] = {}  # state -> (row, step, discounted return)
        for row in rows:
            steps, states, _ = parsed[row]
            for t, (state, ret) in enumerate(zip(states, discounted_returns(steps, gamma), strict=True)):
                anchors.setdefault(state, []).append((row, t, ret))
        for members in anchors.values():
            total += 1
            if len(members) < 2:
                continue
            shared += 1
            for (row, t, _), score in zip(members, normalise([m[2] for m in members], fnorm, eps), strict=True):
                a_s[row][t], sizes[row][t] = score, len(members)
    for row, exp in enumerate(experiences):
        tokens = [0.0] * len(exp.response_token_ids)
        for (start, end), step_adv in zip(parsed[row][2], a_s[row], strict=True):
            tokens[start:end] = [a_e[row] + omega * step_adv] * (end - start)
        exp.token_advantages = tokens
        exp.advantage = a_e[row]
        exp.info["gigpo"] = {"episode_advantage": a_e[row], "step_advantages": a_s[row], "step_group_sizes": sizes[row]}
    steps_all = [v for row in a_s for v in row]
    return {
        "gigpo/step_groups": float(total),
        "gigpo/step_group_hit_ratio": shared / total if total else 0.0,
        "gigpo/mean_abs_episode_advantage": sum(abs(v) for v in a_e) / len(a_e) if a_e else 0.0,
        "gigpo/mean_abs_step_advantage": sum(abs(v) for v in steps_all) / len(steps_all) if steps_all else 0.0,
    }
