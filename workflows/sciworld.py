"""`sciworld`: ScienceWorld (the `scienceworld` package: a text simulator of elementary-science experiments, run on
Java), one command a turn.

After Trinity-RFT's `sciworld_workflow`: each task is a ScienceWorld task and variation (generator:sciworld, rows
`task_name`, `variation`, `simplification`; Trinity's rows, a JSON `task_desc` with `task_name` and `var_num`, work
too). The model sees the task description and the room (ScienceWorld's look-around), answers a command
(<action>look around</action>, see workflows/text_games.py) and sees what ScienceWorld answers. The reward is
ScienceWorld's score normalised to 0-1 (score / 100, a negative score, a failed task, counts 0), given turn by turn as
the score grows; the episode ends when the task is completed (`success`: score 100), failed, or after `max_turns`.

Recorded per episode (`info`): `success`, `score` (0-1), `env_steps` (commands sent to ScienceWorld),
`invalid_actions` (answers with no command, and commands ScienceWorld does not know), `step_states` (the
observation each turn answered: the state of GiGPO's step groups), `step_actions` (each turn's command, or null).

ScienceWorld runs one Java process per environment: the workflow keeps started environments in a pool (per process)
and reloads one for each episode, so a run starts as many JVMs as episodes run at once, once.

workflow_args: max_turns, max_tokens_per_turn, episode_timeout_s (see workflows.multi_turn), invalid_action_reward
  (default 0.0), simplification (overrides the row's).
"""

from __future__ import annotations

import atexit
import json
import threading
from typing import Any

from workflows.base import register_workflow
from workflows.multi_turn import DEFAULT_MAX_TURNS, Env, EnvStep, MultiTurnWorkflow
from workflows.render import Messages
from workflows.text_games import ScoredGame, command_rules, parse_command

UNKNOWN = "No known action matches that input."
MAX_SCORE = 100.0
SYSTEM_PROMPT = (
    "You are an agent doing a science experiment in a text world. Commands: look around, look at OBJ, examine OBJ, "
    "open OBJ, close OBJ, pick up OBJ, move OBJ to OBJ, pour OBJ into OBJ, mix OBJ, activate OBJ, deactivate OBJ, "
    "use OBJ on OBJ, connect OBJ to OBJ, teleport to LOC, go to LOC, focus on OBJ (signals the object the task is "
    "about: focusing on the wrong one fails the task), wait, wait1, inventory. "
)


class _Pool:
    """Started ScienceWorld environments (one JVM each), reused across episodes of this process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[Any] = []

    def take(self) -> Any:
        with self.lock:
            if self.idle:
                return self.idle.pop()
        from scienceworld import ScienceWorldEnv

        return ScienceWorldEnv("", envStepLimit=10_000)  # the workflow's max_turns is the limit

    def give(self, env: Any) -> None:
        with self.lock:
            self.idle.append(env)

    def close(self) -> None:
        with self.lock:
            envs, self.idle = self.idle, []
        for env in envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - the JVM may be gone already
                pass


POOL = _Pool()
atexit.register(POOL.close)


def task_spec(raw: dict[str, Any]) -> tuple[str, int, str | None]:
    """(task name, variation, simplification or None) of a row: generator:sciworld's columns, or Trinity's JSON
    task_desc (`task_name`, `var_num`)."""
    if "task_name" not in raw:
        desc = raw.get("task_desc")
        spec = json.loads(desc) if isinstance(desc, str) and desc.strip().startswith("{") else None
        if not isinstance(spec, dict) or "task_name" not in spec:
            raise KeyError("a sciworld task needs `task_name` and `variation` columns (generator:sciworld), or "
                           "Trinity's task_desc JSON with task_name and var_num")
        raw = {**spec, "variation": spec.get("var_num", spec.get("variation", 0))}
    return str(raw["task_name"]), int(raw.get("variation", 0)), raw.get("simplification")


class SciWorldEnv(ScoredGame, Env):
    """One episode of a ScienceWorld task variation, on a pooled simulator."""

    def __init__(self, task_name: str, variation: int, simplification: str, *, max_turns: int,
                 invalid_reward: float = 0.0, pool: _Pool = POOL) -> None:
        self.task_name, self.variation, self.simplification = task_name, variation, simplification
        self.max_turns = max_turns
        self.invalid_reward = invalid_reward
        self.pool = pool
        self.sim: Any = None
        self.busy = False
        self.observation = ""
        self.task = ""
        self.score = 0.0  # normalised, 0-1
        self.steps = 0
        self.invalid = 0
        self.success = False
        self.done = False
        self.actions: list[str | None] = []

    def _start(self) -> None:
        self.sim = self.pool.take()
        self.busy = True
        self.sim.load(self.task_name, self.variation, self.simplification)
        self.observation, _ = self.sim.reset()
        self.task = self.sim.get_task_description()
        self.busy = False

    def initial_messages(self) -> Messages:
        if self.sim is None:
            self._start()
        system = SYSTEM_PROMPT + command_rules("look around") + f" You have {self.max_turns} turns."
        return [{"role": "system", "content": system},
                {"role": "user", "content": f"{self.task}\n\nObservation:\n{self.observation}\nYour command?"}]

    def state(self) -> str:
        return self.observation

    def step(self, response: str) -> EnvStep:
        command = parse_command(response)
        self.actions.append(command)
        if command is None:
            self.invalid += 1
            return EnvStep([{"role": "user", "content": "That is not a command. Answer with one command in "
                                                        "<action> </action>, e.g. <action>look around</action>."}],
                           reward=self.invalid_reward, metrics=self.metrics())
        self.busy = True
        observation, _, done, info = self.sim.step(command)
        self.busy = False
        self.steps += 1
        if observation.strip() == UNKNOWN:
            self.invalid += 1
        raw = float(info.get("score", 0))
        score = min(max(raw, 0.0), MAX_SCORE) / MAX_SCORE
        reward = self.advance(score)
        self.success = raw >= MAX_SCORE
        self.observation = observation
        self.done = bool(done) or self.success
        if self.done:
            return EnvStep([], reward=reward, done=True, metrics=self.metrics())
        return EnvStep([{"role": "user", "content": f"Observation:\n{observation}\nYour command?"}], reward=reward,
                       metrics=self.metrics())

    def info(self) -> dict[str, Any]:
        return {"step_actions": self.actions, "task_name": self.task_name, "variation": self.variation,
                **self.metrics(), "success": self.success}

    def release(self) -> None:
        """The simulator back to the pool; one still stepping (its episode timed out) is closed instead."""
        sim, self.sim = self.sim, None
        if sim is None:
            return
        if self.busy:
            threading.Thread(target=sim.close, daemon=True).start()
        else:
            self.pool.give(sim)


@register_workflow("sciworld")
class SciWorldWorkflow(MultiTurnWorkflow):
    """ScienceWorld, one command a turn; one episode per sample of the group (Trinity's sciworld_workflow)."""

    @classmethod
    def required_keys(cls, fmt: Any) -> list[str]:
        return []  # task_name and variation, or Trinity's task_desc: checked when the task runs

    def make_env(self, index: int) -> Env:
        args = self.task.workflow_args or {}
        task_name, variation, simplification = task_spec(self.task.raw)
        env = SciWorldEnv(task_name, variation, str(args.get("simplification", simplification or "easy")),
                          max_turns=int(args.get("max_turns", DEFAULT_MAX_TURNS)),
                          invalid_reward=float(args.get("invalid_action_reward", 0.0)))
        self._envs.append(env)
        return env

    def run(self) -> list:
        self._envs: list[SciWorldEnv] = []
        try:
            return super().run()
        finally:
            for env in self._envs:
                env.release()
