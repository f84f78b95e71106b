"""Recorded endpoint calls → trajectories to train on.

An agent's calls through the OpenAI endpoint are recorded one by one (`backends.history.CallRecord`).
Where a call's prompt continues an earlier call exactly (it starts with that call's prompt + response
tokens, which is what a chat template gives when the agent sends the conversation back unchanged),
the calls are one trajectory: the first prompt, then each response (trained, mask 1) and the tokens in
between (the template's turn ends, tool results, user messages: context, mask 0). The endpoint makes
a chat that writes an answer back continue that answer's sampled tokens even where the template would
re-render it otherwise (a tool call: `backends.history.continue_sampled`), so an agent's episode is one
trajectory. A call that continues none — the agent rewrote its history — starts a trajectory of its
own. Either way
every sampled token is trained exactly once, with the logprob it was sampled with — but for calls
sampled under a grammar (`CallRecord.constrained`: structured outputs, a named tool choice), whose
logprobs are those of the masked distribution: their tokens are context (mask 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backends.history import CallRecord


@dataclass
class Trajectory:
    prompt_token_ids: list[int]
    response_token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    calls: int = 0
    finish_reason: str = ""
    text: str = ""

    @property
    def tokens(self) -> list[int]:
        return self.prompt_token_ids + self.response_token_ids

    def add_call(self, call: CallRecord) -> None:
        context = call.prompt_token_ids[len(self.tokens):]
        self.response_token_ids += context + call.response_token_ids
        trained = not call.constrained  # a grammar-constrained call's logprobs are not the policy's
        self.logprobs += [0.0] * len(context) + (list(call.logprobs) if trained else [0.0] * len(call.response_token_ids))
        self.mask += [0] * len(context) + [1 if trained else 0] * len(call.response_token_ids)
        self.calls += 1
        self.finish_reason = call.finish_reason
        self.text += call.text


def build_trajectories(calls: list[CallRecord]) -> list[Trajectory]:
    """Calls in the order they finished → trajectories (each call joins the latest one it continues)."""
    trajectories: list[Trajectory] = []
    for call in sorted(calls, key=lambda c: c.created):
        if len(call.logprobs) != len(call.response_token_ids):
            raise ValueError(f"call {call.request_id}: {len(call.logprobs)} logprobs for "
                             f"{len(call.response_token_ids)} tokens (was it recorded with logprobs?)")
        prompt = call.prompt_token_ids
        host = next((t for t in reversed(trajectories) if len(prompt) >= len(t.tokens) and prompt[:len(t.tokens)] == t.tokens),
                    None)
        if host is None:
            host = Trajectory(prompt_token_ids=list(prompt))
            trajectories.append(host)
        host.add_call(call)
    return trajectories
