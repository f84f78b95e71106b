"""`textworld`: text adventures generated locally with TextWorld (Microsoft's `textworld` package), one command a turn.

Each task is a game: generator:textworld's rows give a seed and the difficulty (`nb_rooms`, `nb_objects`,
`quest_length`), and the workflow makes the game the way `tw-make custom` does, through TextWorld's Python API
(`textworld.generator.make_game` and `compile_game`, the Inform 7 compiler its wheel ships), the first time the game is
played; the compiled game is kept in $RFT_TEXTWORLD_DIR (default ~/.cache/rft/textworld), one file per seed and
difficulty. A row with a `game_file` column plays that game instead (a .z8 / .ulx TextWorld made). The episode is played
through TextWorld's gym API (`textworld.gym.register_game` / `make`).

The model sees the quest (TextWorld's objective), the room and its inventory, answers a command (<action>open
chest</action>, see workflows/text_games.py) and sees TextWorld's answer. The reward is the game's score normalised
to 0-1 (score / max_score), given turn by turn as it grows; the episode ends when the quest is won (`success`), lost,
or after `max_turns`.

Recorded per episode (`info`): `success`, `score` (0-1), `env_steps` (commands sent to the game), `invalid_actions`
(answers with no command), `step_states` (the room description and inventory each turn acted in: the state of GiGPO's
step groups), `step_actions` (each turn's command, or null), `walkthrough_length` (the quest's shortest solution).

ALFWorld (Trinity's alfworld_workflow) runs on TextWorld too, but its game files are a download (ALFRED's data) that
this project cannot fetch: these generated games are the local stand-in.

workflow_args: max_turns, max_tokens_per_turn, episode_timeout_s (see workflows.multi_turn), invalid_action_reward
  (default 0.0).
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any

from workflows.base import register_workflow
from workflows.multi_turn import DEFAULT_MAX_TURNS, Env, EnvStep, MultiTurnWorkflow
from workflows.render import Messages
from workflows.text_games import ScoredGame, command_rules, parse_command

SYSTEM_PROMPT = ("You play a text adventure. Useful commands: look, inventory, go north/south/east/west, examine X, "
                 "take X, take X from Y, put X on Y, insert X into Y, open X, close X, unlock X with Y, lock X with Y, "
                 "eat X, drop X. ")


# TextWorld is not safe to use from two threads at once (each episode runs in a thread of its own: workflows/multi_turn.py):
# its game generator's logic parser and its gym registry and interpreter share state. Measured: every episode of a run
# failed (IndexError "pop from empty list", TatSu's FailedToken on its own logic files) until each use took this lock.
_TEXTWORLD = threading.Lock()


class _ClosedPipe:
    """Stands in for the pipe of a child process that has ended."""

    def send(self, _obj: Any) -> None: ...

    def recv(self) -> None: ...

    def close(self) -> None: ...


def _in_child(env_fn: Any) -> Any:
    """A game's environment in its child process (forked from a Prefect run): ended by the parent's SIGTERM without
    Prefect's handler, which it inherited, and without printing its pipe's EOF when the parent closes it."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the child's own stderr, for its life
    return env_fn()


def games_dir() -> Path:
    root = os.environ.get("RFT_TEXTWORLD_DIR")
    return Path(root) if root else Path.home() / ".cache" / "rft" / "textworld"


def game_file(game_seed: int, nb_rooms: int, nb_objects: int, quest_length: int, folder: Path | None = None) -> Path:
    """The compiled game of these settings, made on first use (a file lock keeps two episodes from making it twice)."""
    folder = folder or games_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"tw-r{nb_rooms}-o{nb_objects}-q{quest_length}-s{game_seed}.z8"
    if path.exists():
        return path
    with open(folder / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            import textworld
            from textworld.generator import compile_game, make_game

            options = textworld.GameOptions()
            options.seeds = game_seed
            options.nb_rooms, options.nb_objects, options.quest_length = nb_rooms, nb_objects, quest_length
            options.path = str(folder / f".tmp-{os.getpid()}-{path.name}")
            options.force_recompile = True
            with _TEXTWORLD:
                made = Path(compile_game(make_game(options), options))
            for extra in (made.with_suffix(".json"), made.with_suffix(".ni")):
                if extra.exists():
                    extra.replace(path.with_suffix(extra.suffix))
            made.replace(path)
    return path


def row_game(raw: dict[str, Any]) -> Path:
    """A task's game file: its `game_file`, else the game its generator:textworld row describes."""
    if raw.get("game_file"):
        return Path(str(raw["game_file"]))
    if "game_seed" not in raw:
        raise KeyError("a textworld task needs `game_seed` (generator:textworld: with nb_rooms, nb_objects, "
                       "quest_length) or a `game_file`")
    return game_file(int(raw["game_seed"]), int(raw.get("nb_rooms", 2)), int(raw.get("nb_objects", 4)),
                     int(raw.get("quest_length", 2)))


def _clean(text: str) -> str:
    """TextWorld's answer without its prompt sign and blank runs."""
    lines = [line.rstrip() for line in text.replace("\r", "").split("\n")]
    lines = [line for line in lines if line.strip() not in (">", "")]
    return "\n".join(lines).strip()


class TextWorldEnv(ScoredGame, Env):
    """One episode of a TextWorld game, through textworld.gym."""

    def __init__(self, path: Path, *, max_turns: int, invalid_reward: float = 0.0) -> None:
        import textworld
        import textworld.gym
        from textworld.envs.batch import AsyncBatchEnv

        self.path = path
        self.max_turns = max_turns
        self.invalid_reward = invalid_reward
        infos = textworld.EnvInfos(objective=True, description=True, inventory=True, score=True, max_score=True,
                                   won=True, lost=True, policy_commands=True)
        with _TEXTWORLD:
            env_id = textworld.gym.register_game(str(path), infos, max_episode_steps=10_000)
            self.game = textworld.gym.make(env_id)
            # The game's interpreter (jericho's C library) keeps global state: two games loaded in one process crash
            # it (a segmentation fault, measured with the recipe's 4 episodes). Each game plays in a child process.
            batch = self.game.batch_env
            self.game.batch_env = AsyncBatchEnv([partial(_in_child, fn) for fn in batch.env_fns], batch.auto_reset)
            batch.close()
            _, info = self.game.reset()
        self.objective = str(info["objective"])
        self.description = _clean(str(info["description"]))
        self.inventory = _clean(str(info["inventory"]))
        self.max_score = max(float(info["max_score"]), 1.0)
        self.walkthrough = list(info.get("policy_commands") or [])
        self.score = 0.0  # normalised, 0-1
        self.steps = 0
        self.invalid = 0
        self.success = False
        self.actions: list[str | None] = []

    def initial_messages(self) -> Messages:
        system = SYSTEM_PROMPT + command_rules("open chest") + f" You have {self.max_turns} turns."
        return [{"role": "system", "content": system},
                {"role": "user", "content": f"{self.objective}\n\n{self.description}\n\n{self.inventory}\nYour command?"}]

    def state(self) -> str:
        return f"{self.description}\n{self.inventory}"

    def step(self, response: str) -> EnvStep:
        command = parse_command(response)
        self.actions.append(command)
        if command is None:
            self.invalid += 1
            return EnvStep([{"role": "user", "content": "That is not a command. Answer with one command in "
                                                        "<action> </action>, e.g. <action>look</action>."}],
                           reward=self.invalid_reward, metrics=self.metrics())
        with _TEXTWORLD:
            observation, raw, done, info = self.game.step(command)
        self.steps += 1
        self.description = _clean(str(info["description"]))
        self.inventory = _clean(str(info["inventory"]))
        score = min(max(float(raw), 0.0) / self.max_score, 1.0)
        reward = self.advance(score)
        self.success = bool(info.get("won"))
        if done or self.success or info.get("lost"):
            return EnvStep([], reward=reward, done=True, metrics=self.metrics())
        return EnvStep([{"role": "user", "content": f"{_clean(observation)}\nYour command?"}], reward=reward,
                       metrics=self.metrics())

    def info(self) -> dict[str, Any]:
        return {"step_actions": self.actions, "game": self.path.name, "walkthrough_length": len(self.walkthrough),
                **self.metrics(), "success": self.success}

    def close(self) -> None:
        # Each game's child process ends here, and its handle is left nothing to say to it: TextWorld's own close and
        # its finalizers would write to the closed pipe and print a BrokenPipeError per episode.
        batch = self.game.batch_env
        for child in getattr(batch, "envs", []):
            child._process.terminate()
            child._process.join(timeout=10)
            child._pipe = _ClosedPipe()
        batch.envs = []


@register_workflow("textworld")
class TextWorldWorkflow(MultiTurnWorkflow):
    """A generated TextWorld game, one command a turn; one episode per sample of the group."""

    @classmethod
    def required_keys(cls, fmt: Any) -> list[str]:
        return []  # game_seed (and the difficulty) or game_file: checked when the task runs

    def make_env(self, index: int) -> Env:
        args = self.task.workflow_args or {}
        env = TextWorldEnv(row_game(self.task.raw), max_turns=int(args.get("max_turns", DEFAULT_MAX_TURNS)),
                           invalid_reward=float(args.get("invalid_action_reward", 0.0)))
        self._envs.append(env)
        return env

    def run(self) -> list:
        self._envs: list[TextWorldEnv] = []
        try:
            return super().run()
        finally:
            for env in self._envs:
                env.close()
