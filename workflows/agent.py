"""Agent workflows: any agent written against the `openai` client, trained on what it sampled.

Each episode gets its own rollout id and a client whose base URL carries it
(`http://127.0.0.1:PORT/rollouts/<id>/v1`, see `backends.history`); the agent runs unchanged, the
engine's endpoint records every call (prompt and response token ids, logprobs), and afterwards the
calls become experiences (`workflows.trajectory`): one per trajectory, all with the episode's reward.

A subclass writes the agent:

    @register_workflow("my_agent")
    class MyAgent(AgentWorkflow):
        def run_agent(self, client, model, sampling) -> AgentOutcome:
            reply = client.chat.completions.create(model=model, messages=[...], **sampling)
            return AgentOutcome(reward=score(reply.choices[0].message.content))

Needs explorer.rollout_model.enable_openai_api and enable_history. `sampling` holds the taskset's
temperature / top_p / max_tokens: the trainer recomputes logprobs at that temperature, so calls
sampled at another are not trained (they are counted in `info["calls_skipped"]`).

workflow_args: episode_timeout_s (default 300): an agent still running then fails its episode (its
  HTTP calls time out too); the other episodes go on, and a task fails only when all of them fail.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from backends.history import rollout_base_url
from backends.rollout import Sample
from buffer.experience import Experience
from workflows.base import Workflow
from workflows.multi_turn import DEFAULT_EPISODE_TIMEOUT_S, EpisodeFailure
from workflows.trajectory import build_trajectories

logger = logging.getLogger(__name__)
SERVED_MODEL = "policy"  # every engine's endpoint also answers to this name (besides model.model_path)


@dataclass
class AgentOutcome:
    reward: float
    breakdown: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)  # e.g. success, tool_calls


class AgentWorkflow(Workflow, ABC):
    """`repeat_times` episodes of `run_agent`, side by side; experiences from the recorded calls."""

    @abstractmethod
    def run_agent(self, client: Any, model: str, sampling: dict[str, Any]) -> AgentOutcome:
        """Run one episode with `client` (an `openai.OpenAI`); return its reward."""

    def sampling_kwargs(self) -> dict[str, Any]:
        s = self.sampling_settings()
        kwargs: dict[str, Any] = {"temperature": s.temperature, "top_p": s.top_p, "max_completion_tokens": s.max_tokens}
        if s.top_k != -1:
            kwargs["extra_body"] = {"top_k": s.top_k}
        return kwargs

    def run(self) -> list[Experience]:
        import openai

        base_url = self.engine.openai_base_url()
        if not base_url:
            raise RuntimeError(f"workflow {self.name!r} drives the engine's OpenAI endpoint: set "
                               "explorer.rollout_model.enable_openai_api: true and enable_history: true")
        timeout = float((self.task.workflow_args or {}).get("episode_timeout_s", DEFAULT_EPISODE_TIMEOUT_S))
        sampling = self.sampling_kwargs()
        api_key = self.engine.openai_api_key()
        rollout_ids = [f"{self.group_id}/{i}" for i in range(self.repeat_times)]

        def episode(rollout_id: str) -> AgentOutcome:
            client = openai.OpenAI(base_url=rollout_base_url(base_url, rollout_id), api_key=api_key,
                                   timeout=timeout, max_retries=0)
            try:
                return self.run_agent(client, SERVED_MODEL, dict(sampling))
            finally:
                client.close()

        started = time.monotonic()
        pool = ThreadPoolExecutor(max_workers=self.repeat_times, thread_name_prefix="agent")
        futures = [pool.submit(episode, rid) for rid in rollout_ids]
        outcomes: list[AgentOutcome | str] = []
        for future in futures:
            try:
                outcomes.append(future.result(timeout=max(timeout - (time.monotonic() - started), 0.0)))
            except FutureTimeout:
                outcomes.append(f"the agent did not finish within {timeout:g} s (episode_timeout_s)")
            except Exception as err:
                outcomes.append(f"the agent failed: {type(err).__name__}: {err}")
        pool.shutdown(wait=False, cancel_futures=True)

        experiences: list[Experience] = []
        failures = [o for o in outcomes if isinstance(o, str)]
        for i, (rollout_id, outcome) in enumerate(zip(rollout_ids, outcomes, strict=True)):
            calls = self.engine.call_history(rollout_id)  # read even for a failed episode: it frees them
            if isinstance(outcome, str):
                logger.warning("task %s: episode %d failed: %s", self.task.task_id, i, outcome)
                continue
            usable = [c for c in calls if abs(c.temperature - sampling["temperature"]) < 1e-6]
            if len(usable) < len(calls):
                logger.warning("task %s: episode %d made %d call(s) at another temperature than the taskset's %g: "
                               "not trained (pass the `sampling` arguments to each call)", self.task.task_id, i,
                               len(calls) - len(usable), sampling["temperature"])
            trajectories = build_trajectories(usable)
            if not trajectories:
                failures.append(f"episode {i} made no call the endpoint recorded")
                continue
            for j, t in enumerate(trajectories):
                sample = Sample(t.prompt_token_ids, t.response_token_ids, t.logprobs, t.finish_reason, t.text)
                exp = self.make_experience(
                    sample, f"{i}.{j}", reward=outcome.reward, breakdown=outcome.breakdown,  # type: ignore[arg-type]
                    info={"turns": sum(1 for c in calls), "calls": t.calls, "trajectories": len(trajectories),
                          "calls_skipped": len(calls) - len(usable), "rollout_id": rollout_id,
                          "episodes_failed": len(failures), **outcome.metrics},
                )
                exp.response_mask = list(t.mask)
                experiences.append(exp)
        if not experiences:
            raise EpisodeFailure("; ".join(failures) or "no episode produced an experience")
        return experiences
