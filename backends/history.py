"""What an OpenAI-compatible endpoint records of each call, whatever engine serves it.

An agent written against the `openai` client (or LiteLLM) calls an endpoint of a rollout engine; the
endpoint keeps, per rollout id, the exact prompt and response token ids and the logprob of each sampled
token, so the calls become trainable experiences without any change to the agent's code. Nothing here
knows vLLM: the vLLM server (`backends.local.openai_server`) records into a `CallHistory`, and so will
the Tinker sampler's.

The rollout id travels with the request, whichever is easier for the agent:
  - a per-episode base URL:  http://127.0.0.1:PORT/rollouts/<rollout id>/v1   (nothing to change in the agent)
  - a header:                X-Rollout-Id: <rollout id>
Calls without one are recorded under "" (the serve mode's plain clients).

Within a rollout, a call whose chat writes an earlier call's answer back continues that answer's exact
sampled tokens (`continue_sampled`): a chat template re-renders a turn — a tool call above all — with
other tokens than the model sampled, which would split the episode and train on tokens nobody sampled.
"""

from __future__ import annotations

import contextvars
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ROLLOUT_HEADER = "x-rollout-id"
ROLLOUT_PATH = re.compile(r"^/rollouts/(?P<rid>[A-Za-z0-9_.:@/-]+?)(?P<rest>/v1(?:/.*)?)$")
# The rollout id of the request being served (set by RolloutIdMiddleware, read where calls are recorded).
current_rollout_id: contextvars.ContextVar[str] = contextvars.ContextVar("rollout_id", default="")


@dataclass
class CallRecord:
    """One sampled completion of one call: what training needs, plus what explains it."""

    rollout_id: str
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    logprobs: list[float]  # of each response token, under the distribution sampled from
    finish_reason: str
    text: str = ""
    temperature: float = 1.0
    model_version: int = 0
    request_id: str = ""
    index: int = 0  # the choice index within the call (n > 1)
    # sampled under a grammar (structured outputs, a named or required tool choice): its logprobs are
    # those of the masked distribution, not the policy's, so it is context, not a training target
    constrained: bool = False
    created: float = field(default_factory=time.time)
    # what the chat template rendered, where the endpoint replaced written-back turns by their sampled
    # tokens (`continue_sampled`); None: the prompt is the template's
    rendered_prompt_token_ids: list[int] | None = None

    @property
    def rendered(self) -> list[int]:
        return self.prompt_token_ids if self.rendered_prompt_token_ids is None else self.rendered_prompt_token_ids


def continue_sampled(prompt: list[int], earlier: list[CallRecord], decode: Callable[[list[int]], str]) -> list[int] | None:
    """The prompt to sample from when `prompt` (a chat template's rendering) writes an earlier call's
    answer back: that call's prompt + its sampled tokens + what the template put after the turn.

    The latest earlier call whose rendered prompt starts `prompt` is the one answered; its answer ended
    with a stop token (finish "stop", the token kept in the ids), and the template's turn ends at the
    first such token after the earlier prompt. The two versions of the turn must say the same thing up
    to whitespace (a tool call's JSON re-serialised, say; `decode` keeps special tokens); otherwise — or if the answer was cut off, or
    the agent rewrote its history — None: the template's prompt stands (a trajectory of its own).
    """
    for call in sorted(earlier, key=lambda c: c.created, reverse=True):
        head = call.rendered
        if len(prompt) <= len(head) or prompt[:len(head)] != head:
            continue
        sampled = call.response_token_ids
        if call.finish_reason != "stop" or not sampled:
            return None
        rest, stop = prompt[len(head):], sampled[-1]
        if stop not in rest:
            return None
        end = rest.index(stop)
        if "".join(decode(rest[:end]).split()) != "".join(decode(sampled[:-1]).split()):
            return None
        return call.prompt_token_ids + sampled + rest[end + 1:]
    return None


class CallHistory:
    """Thread-safe store of call records by rollout id, bounded: the oldest rollouts go first.

    The bound keeps a long-running endpoint (serve mode, an agent nobody collects from) from growing
    without limit; `dropped` counts what was let go.
    """

    def __init__(self, max_calls: int = 100_000) -> None:
        self.max_calls = max_calls
        self.dropped = 0
        self._calls: OrderedDict[str, list[CallRecord]] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    def record(self, call: CallRecord) -> None:
        with self._lock:
            self._calls.setdefault(call.rollout_id, []).append(call)
            self._calls.move_to_end(call.rollout_id)
            self._count += 1
            while self._count > self.max_calls and self._calls:
                _, calls = self._calls.popitem(last=False)
                self._count -= len(calls)
                self.dropped += len(calls)

    def get(self, rollout_id: str, *, pop: bool = True) -> list[CallRecord]:
        """The calls of one rollout in the order they finished; `pop` forgets them."""
        with self._lock:
            calls = self._calls.pop(rollout_id, []) if pop else list(self._calls.get(rollout_id, []))
            if pop:
                self._count -= len(calls)
            return calls

    def rollout_ids(self) -> list[str]:
        with self._lock:
            return list(self._calls)

    def __len__(self) -> int:
        return self._count


class RolloutIdMiddleware:
    """ASGI middleware: takes the rollout id from the path prefix or the header, serves the rest as is.

    Pure ASGI (not Starlette's BaseHTTPMiddleware) so the context variable it sets is seen by the
    handler and by every task the handler starts (streaming responses included).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rollout_id = ""
        match = ROLLOUT_PATH.match(scope["path"])
        if match:
            rollout_id = match["rid"]
            scope = {**scope, "path": match["rest"], "raw_path": match["rest"].encode()}
        else:
            for name, value in scope.get("headers", []):
                if name.decode("latin-1").lower() == ROLLOUT_HEADER:
                    rollout_id = value.decode("latin-1")
                    break
        token = current_rollout_id.set(rollout_id)
        try:
            await self.app(scope, receive, send)
        finally:
            current_rollout_id.reset(token)


def rollout_base_url(base_url: str, rollout_id: str) -> str:
    """The per-episode base URL of an endpoint (`http://host:port/v1` → `.../rollouts/<id>/v1`)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    if not re.fullmatch(r"[A-Za-z0-9_.:@/-]+", rollout_id):
        raise ValueError(f"rollout id {rollout_id!r}: use letters, digits and _ . : @ / - only")
    return f"{root}/rollouts/{rollout_id}/v1"
