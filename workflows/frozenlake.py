"""`frozenlake`: walk a FrozenLake map (gymnasium's `FrozenLakeEnv`) from S to the goal G, one move a turn.

After Trinity-RFT's `frozen_lake_workflow` (its examples/grpo_frozen_lake): the model sees the map as text and
answers each turn with one move; the environment steps gymnasium's FrozenLake and shows the new map. The episode
ends on the goal (reward 1.0, `success`), in a hole (reward 0), or after `max_turns` turns.

The map the model sees, one row a line: `P` the player, `_` frozen ice, `O` a hole, `G` the goal (the start is ice
once left). A move is `Up`, `Down`, `Left` or `Right` (any case), written in triple backticks: the last
```...``` block of the answer counts, e.g. "I go down. ```Down```"; Trinity's numbers are accepted there too
(1 Left, 2 Down, 3 Right, 4 Up). An answer with no backticks counts only when it is the move word alone
("Down" or "down."). Anything else is an invalid action: the player does not move, the turn earns
`invalid_action_reward` (0, as in Trinity) and the model is told the format again. A move into the edge is a move
that leaves the player where it was (the model is told so).

Rows (generator:frozenlake, or a file): `map` (rows of S, F, H, G, one a line, or a list of rows: gymnasium's
`desc`), optional `is_slippery`; or Trinity's rows `seed`, `size`, `p` (a map is drawn from them, with a path of
at most `max_turns` moves). Each episode of a group walks the same map; on slippery ice its own random stream
(seeded by the task id and the episode's index) decides the slips.

Recorded per episode (`info`): `success`, `env_steps` (moves made), `invalid_actions`, `step_states` (the map
each turn saw: the state of GiGPO's step groups), `step_actions` (each turn's move, or null) and `positions` (the
player's [row, column] before each turn).

workflow_args: max_turns, max_tokens_per_turn, episode_timeout_s (see workflows.multi_turn), is_slippery
  (overrides the row's), invalid_action_reward (default 0.0), goal_hint (default false: true adds where the goal
  lies from the player under each map, e.g. "The goal is 2 steps down and 1 step left."; not the holes).
"""

from __future__ import annotations

import random
import re
import zlib
from typing import Any

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake

from generators.games import (
    find_cell,
    frozenlake_goal_hint,
    frozenlake_map,
    frozenlake_rules,
    frozenlake_turn,
    frozenlake_view,
    shortest_path,
)
from workflows.base import register_workflow
from workflows.multi_turn import DEFAULT_MAX_TURNS, Env, EnvStep, MultiTurnWorkflow
from workflows.render import Messages

# gymnasium's action numbers
GYM_ACTIONS = {"left": 0, "down": 1, "right": 2, "up": 3}
# Trinity-RFT's numbers for the same moves
TRINITY_ACTIONS = {"1": "left", "2": "down", "3": "right", "4": "up"}
FENCED = re.compile(r"```\s*([^`]*?)\s*```", re.DOTALL)
DEFAULT_INVALID_ACTION_REWARD = 0.0


def parse_action(text: str) -> str | None:
    """The move of an answer ("up", "down", "left", "right"), or None: the last ```...``` block (a move word in any
    case, or Trinity's 1-4), else the answer when it is the move word alone."""
    blocks = FENCED.findall(text)
    if blocks:
        word = blocks[-1].strip().strip(".").lower()
        word = TRINITY_ACTIONS.get(word, word)
        return word if word in GYM_ACTIONS else None
    word = text.strip().strip(".!").strip().lower()
    return word if word in GYM_ACTIONS else None


def map_rows(value: object) -> list[str]:
    """A map from a row: rows of S/F/H/G one a line, or a list of rows (ValueError if it is not one)."""
    rows = value.split() if isinstance(value, str) else [str(r) for r in value] if isinstance(value, list | tuple) else []
    if not rows or any(len(r) != len(rows[0]) or set(r) - set("SFHG") for r in rows):
        raise ValueError(f"a FrozenLake map is rows of S, F, H, G of one length, got {value!r}")
    find_cell(rows, "S")
    find_cell(rows, "G")
    return rows


def task_map(raw: dict[str, Any], max_moves: int) -> list[str]:
    """A task's map: its `map` column, else one drawn from Trinity-RFT's columns `seed`, `size` and `p` (the frozen
    probability) with a path of at most `max_moves` moves from S to G."""
    if "map" in raw:
        return map_rows(raw["map"])
    if "seed" not in raw:
        raise KeyError("a frozenlake task needs a `map` column (generator:frozenlake), or Trinity's `seed`, `size` and `p`")
    rng = random.Random(f"{raw['seed']}/{raw.get('size', 4)}/{raw.get('p', 0.8)}")
    for _ in range(10_000):
        rows = frozenlake_map(rng, int(raw.get("size", 4)), float(raw.get("p", 0.8)))
        if (path := shortest_path(rows)) is not None and path <= max_moves:
            return rows
    raise ValueError(f"no map of size {raw.get('size')} with p {raw.get('p')} has a path of at most {max_moves} moves")


class FrozenLakeEnv(Env):
    def __init__(self, rows: list[str], *, is_slippery: bool, max_turns: int, seed: int,
                 invalid_reward: float = DEFAULT_INVALID_ACTION_REWARD, goal_hint: bool = False) -> None:
        self.rows = rows
        self.goal_hint = goal_hint
        self.is_slippery = is_slippery
        self.max_turns = max_turns
        self.invalid_reward = invalid_reward
        self.gym = GymFrozenLake(desc=rows, is_slippery=is_slippery)
        self.gym.reset(seed=seed)
        self.moves = 0
        self.invalid = 0
        self.success = False
        self.actions: list[str | None] = []
        self.positions: list[list[int]] = []

    @property
    def position(self) -> tuple[int, int]:
        return divmod(int(self.gym.s), self.gym.ncol)

    def observation(self) -> str:
        """The map as the model sees it: P on the player's cell."""
        return frozenlake_view(self.rows, self.position)

    def turn(self, note: str = "") -> str:
        """The user turn that shows the map (with goal_hint, where the goal lies) and asks for a move."""
        where = frozenlake_goal_hint(self.rows, self.position) if self.goal_hint else ""
        return frozenlake_turn(self.observation(), note, where)

    def initial_messages(self) -> Messages:
        return [{"role": "system", "content": frozenlake_rules(self.max_turns, self.is_slippery)},
                {"role": "user", "content": self.turn()}]

    def state(self) -> str:
        return self.observation()

    def step(self, response: str) -> EnvStep:
        self.positions.append(list(self.position))
        action = parse_action(response)
        self.actions.append(action)
        if action is None:
            self.invalid += 1
            return EnvStep([{"role": "user", "content": (
                "That is not a move. Answer with one of ```Up```, ```Down```, ```Left```, ```Right```.\n"
                + self.turn())}], reward=self.invalid_reward, metrics=self.metrics())
        before = self.position
        _, reward, terminated, _, _ = self.gym.step(GYM_ACTIONS[action])
        self.moves += 1
        if terminated:  # the goal (reward 1) or a hole (0)
            self.success = reward > 0
            return EnvStep([], reward=float(reward), done=True, metrics=self.metrics())
        note = "You hit the edge and did not move. " if self.position == before else ""
        return EnvStep([{"role": "user", "content": self.turn(note)}],
                       metrics=self.metrics())

    def metrics(self) -> dict[str, float]:
        return {"success": float(self.success), "env_steps": float(self.moves), "invalid_actions": float(self.invalid)}

    def final_reward(self) -> tuple[float, dict[str, float]]:
        return 0.0, {"accuracy": 1.0 if self.success else 0.0}  # the goal's 1.0 is the last turn's reward

    def info(self) -> dict[str, Any]:
        return {"step_actions": self.actions, "positions": self.positions, **self.metrics(), "success": self.success}


@register_workflow("frozenlake")
class FrozenLakeWorkflow(MultiTurnWorkflow):
    """FrozenLake on gymnasium, one move a turn; one episode per sample of the group (Trinity's frozen_lake_workflow)."""

    @classmethod
    def required_keys(cls, fmt: Any) -> list[str]:
        return []  # `map`, or Trinity's `seed`, `size`, `p`: checked when the task runs

    def make_env(self, index: int) -> Env:
        args = self.task.workflow_args or {}
        max_turns = int(args.get("max_turns", DEFAULT_MAX_TURNS))
        slippery = args.get("is_slippery", self.task.raw.get("is_slippery", False))
        return FrozenLakeEnv(
            task_map(self.task.raw, max_turns),
            is_slippery=bool(slippery),
            max_turns=max_turns,
            seed=zlib.crc32(f"{self.task.task_id}/{index}".encode()),
            invalid_reward=float(args.get("invalid_action_reward", DEFAULT_INVALID_ACTION_REWARD)),
            goal_hint=bool(args.get("goal_hint", False)),
        )
