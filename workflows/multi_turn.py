"""Multi-turn workflows: an environment loop (observe → model turn → env step → reward) per episode.

The shape follows tinker-cookbook's `Env` / `EnvGroupBuilder`: a workflow builds one `Env` per episode
of a group (`make_env`), the env gives the first messages, answers each model turn with messages, a
reward and whether the episode is over, and the group's episodes can get a final reward together
(`group_rewards`). Chats become tokens once: the first prompt is rendered with the chat template and
every later turn continues from the exact tokens (previous prompt + sampled tokens + the env's
messages rendered as a continuation, `ChatRenderer.continuation`), so what is trained is exactly what
was sampled.

Each episode becomes one `Experience`: the first prompt as `prompt_token_ids`, then every model turn
and env reply in order as `response_token_ids`, with `response_mask` 1 on the model's tokens and 0 on
the env's (context, not target), logprobs 0.0 there. Its reward is the sum of the turn rewards, the
env's final reward and the group reward; `info` keeps the per-turn rewards, the number of turns,
success and why the episode stopped, where each model turn lies in the response (`turn_spans`, [start, end) of
`response_token_ids`) and, for an env that names its state (`Env.state`), the state each turn acted in
(`step_states`, one per model turn): what step-wise credit assignment (GiGPO's grouping of the steps of a
group's episodes by the state they saw) needs.

Limits (taskset `workflow_args`):
  max_turns (int, default 10)             model turns per episode
  max_tokens_per_turn (int, default 64)   tokens one model turn may sample
  episode_timeout_s (float, default 300)  an episode running longer (a stuck environment) fails: it is
                                          dropped with its reason, the other episodes of the task go
                                          on; only a task whose every episode fails fails
The whole trajectory (model and env tokens) fits in model.max_response_tokens; an episode that runs
out of room stops ("budget").

Each episode runs in its own thread (a slow environment delays only its episode); the runner's
`CoalescingEngine` merges the episodes' model turns into shared engine calls.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from backends.rollout import Sample
from buffer.experience import Experience
from workflows.base import Workflow
from workflows.render import Messages

logger = logging.getLogger(__name__)

DEFAULT_MAX_TURNS = 10
DEFAULT_MAX_TOKENS_PER_TURN = 64
DEFAULT_EPISODE_TIMEOUT_S = 300.0


@dataclass
class EnvStep:
    """The environment's answer to one model turn."""

    messages: Messages = field(default_factory=list)  # what it says next (user / tool messages); context
    reward: float = 0.0  # this turn's reward
    done: bool = False
    metrics: dict[str, float] = field(default_factory=dict)


class Env(ABC):
    """One episode's environment. Plain and synchronous: a step that hangs is timed out by the loop."""

    @abstractmethod
    def initial_messages(self) -> Messages:
        """The chat the model answers first (system prompt and the first observation)."""

    @abstractmethod
    def step(self, response: str) -> EnvStep:
        """React to the model's turn (its text, special tokens removed)."""

    def final_reward(self) -> tuple[float, dict[str, float]]:
        """Reward and breakdown at the end of the episode (on top of the turn rewards)."""
        return 0.0, {}

    def tools(self) -> list[dict] | None:
        """OpenAI-style tool definitions the chat template should show, if any."""
        return None

    def state(self) -> str | None:
        """The state the model is about to act in, as a key (e.g. the observation text): read before each model
        turn and kept as the episode's `info["step_states"]`, so the steps of a group's episodes can be grouped by
        the state they saw. None (the default): not recorded."""
        return None

    def info(self) -> dict[str, Any]:
        """More of the episode to keep in its experience's `info` at the end (JSON values, e.g. the actions taken)."""
        return {}


class EpisodeFailure(RuntimeError):
    """Every episode of a task failed; the message gives each reason."""


@dataclass
class Episode:
    """One trajectory, built turn by turn."""

    env: Env
    prompt_token_ids: list[int]
    started: float = field(default_factory=time.monotonic)
    response_token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    turns: int = 0
    stop: str = ""  # "done" | "max_turns" | "budget"; empty while running
    failure: str = ""  # why the episode failed (it is then dropped)
    last_turn: list[int] = field(default_factory=list)  # the latest model turn's ids
    last_text: str = ""  # and its text, for the env
    waiting: str = "the model"  # what the episode waits for (for the timeout's message)
    states: list[str] = field(default_factory=list)  # Env.state before each model turn (when it names one)
    turn_spans: list[list[int]] = field(default_factory=list)  # [start, end) of each model turn in the response

    @property
    def tokens(self) -> list[int]:
        return self.prompt_token_ids + self.response_token_ids

    @property
    def running(self) -> bool:
        return not self.stop and not self.failure

    def add(self, ids: list[int], logprobs: list[float] | None, trained: bool) -> None:
        self.response_token_ids += ids
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.mask += [1 if trained else 0] * len(ids)


class MultiTurnWorkflow(Workflow, ABC):
    """`repeat_times` episodes of `make_env`, stepped together; one experience per episode."""

    @abstractmethod
    def make_env(self, index: int) -> Env:
        """The environment of episode `index` of this task's group."""

    def group_rewards(self, episodes: list[Episode]) -> list[float]:
        """Rewards given to the finished episodes together (tinker-cookbook's compute_group_rewards)."""
        return [0.0] * len(episodes)

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> list[Experience]:
        args = self.task.workflow_args or {}
        max_turns = int(args.get("max_turns", DEFAULT_MAX_TURNS))
        per_turn = int(args.get("max_tokens_per_turn", DEFAULT_MAX_TOKENS_PER_TURN))
        timeout = float(args.get("episode_timeout_s", DEFAULT_EPISODE_TIMEOUT_S))
        budget = self.max_tokens if self.max_tokens is not None else 1024  # room for the whole trajectory

        episodes = []
        for i in range(self.repeat_times):
            env = self.make_env(i)
            episodes.append(Episode(env, self.renderer.render(env.initial_messages(), tools=env.tools())))
        # One thread per episode: a slow environment delays only its own episode. The runner's
        # CoalescingEngine merges the episodes' model turns into shared engine calls.
        pool = ThreadPoolExecutor(max_workers=len(episodes), thread_name_prefix="episode")
        futures = [pool.submit(self._play, e, max_turns, per_turn, budget) for e in episodes]
        for e, future in zip(episodes, futures, strict=True):
            try:
                future.result(timeout=max(timeout - (time.monotonic() - e.started), 0.0))
            except FutureTimeout:
                e.failure = (f"the episode did not finish within {timeout:g} s (episode_timeout_s): it was waiting "
                             f"for {e.waiting} at turn {e.turns}")
            except Exception as err:  # a broken env (or an engine error) fails its episode, not the task
                e.failure = f"turn {e.turns} failed while waiting for {e.waiting}: {type(err).__name__}: {err}"
        pool.shutdown(wait=False, cancel_futures=True)  # a stuck episode's thread is left behind, not waited for

        finished = [e for e in episodes if not e.failure]
        for e in episodes:
            if e.failure:
                logger.warning("task %s: an episode failed: %s", self.task.task_id, e.failure)
        if not finished:
            raise EpisodeFailure("; ".join(f"episode {i}: {e.failure}" for i, e in enumerate(episodes)))
        group = self.group_rewards(finished)
        return [self._experience(e, i, group_reward, len(episodes) - len(finished))
                for i, (e, group_reward) in enumerate(zip(finished, group, strict=True))]

    def _play(self, e: Episode, max_turns: int, per_turn: int, budget: int) -> None:
        """Model turn, env step, until the env says done or a limit is reached."""
        while e.running:
            room = budget - len(e.response_token_ids)
            if room <= 0:
                e.stop = "budget"
                return
            state = e.env.state()
            if state is not None:
                e.states.append(state)
            e.waiting = "the model"
            self._model_turn(e, min(per_turn, room))
            e.waiting = "the environment"
            step = e.env.step(e.last_text)
            if e.failure:  # timed out meanwhile: the workflow has moved on
                return
            e.turn_rewards.append(float(step.reward))
            for key, value in step.metrics.items():
                e.metrics[key] = float(value)
            if step.done:
                e.stop = "done"
            elif e.turns >= max_turns:
                e.stop = "max_turns"
            elif step.messages:
                ids = self.renderer.continuation(step.messages, e.last_turn, tools=e.env.tools())
                if len(e.response_token_ids) + len(ids) >= budget:
                    e.stop = "budget"
                else:
                    e.add(ids, None, trained=False)

    def _model_turn(self, e: Episode, max_tokens: int) -> None:
        settings = self.sampling_settings()
        settings.n, settings.max_tokens = 1, max_tokens
        (sample,) = self.renderer.with_text(self.engine.generate([e.tokens], settings)[0])
        e.turn_spans.append([len(e.response_token_ids), len(e.response_token_ids) + len(sample.response_token_ids)])
        e.add(list(sample.response_token_ids), list(sample.logprobs), trained=True)
        e.last_turn = list(sample.response_token_ids)
        e.last_text = sample.text
        e.turns += 1

    def _experience(self, e: Episode, index: int, group_reward: float, failed: int) -> Experience:
        final, breakdown = e.env.final_reward()
        reward = sum(e.turn_rewards) + final + group_reward
        breakdown = {**breakdown, "turn_rewards": sum(e.turn_rewards)}
        if group_reward:
            breakdown["group"] = group_reward
        sample = Sample(e.prompt_token_ids, e.response_token_ids, e.logprobs, e.stop,
                        self.renderer.decode_raw(e.response_token_ids))
        info = {"turns": e.turns, "turn_rewards": e.turn_rewards, "stop": e.stop,
                "success": bool(e.metrics.get("success", 0.0)), "episodes_failed": failed, **e.metrics,
                "turn_spans": e.turn_spans}
        if e.states:
            info["step_states"] = e.states
        exp = self.make_experience(sample, index, reward=reward, breakdown=breakdown, info={**info, **e.env.info()})
        exp.response_mask = list(e.mask)
        return exp


def episode_stats(experiences: list[Experience]) -> dict[str, float]:
    """Turns per episode, success rate, environment steps per episode and failed episodes of multi-turn / agent
    experiences ({} for single-turn ones): what explore and evaluate report next to the reward. An env's steps are
    its `env_steps` metric where it reports one (FrozenLake: the moves made, Sudoku: the turns whose moves were
    accepted), else its turns."""
    episodes = [e for e in experiences if "turns" in e.info]
    if not episodes:
        return {}
    n = len(episodes)
    return {
        "turns_mean": sum(float(e.info["turns"]) for e in episodes) / n,
        "success_rate": sum(1.0 for e in episodes if e.info.get("success")) / n,
        "steps_per_episode": sum(float(e.info.get("env_steps", e.info["turns"])) for e in episodes) / n,
        "episodes_failed": float(sum({e.group_id: e.info.get("episodes_failed", 0) for e in episodes}.values())),
    }
