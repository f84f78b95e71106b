"""Bounds on the OpenAI endpoint's requests, so one client cannot starve the batch rollouts on the same engine:
a body size, a cap on the tokens one request may ask for (and the default when it asks for none), and a
number of requests in flight at once (beyond it: 429, the client retries later). Pure ASGI, in front of
vLLM's app; paths outside /v1 (health) pass."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

TOKEN_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
GENERATING = ("/v1/completions", "/v1/chat/completions", "/v1/responses")


@dataclass(frozen=True)
class Limits:
    max_concurrent: int
    max_body_bytes: int
    max_tokens: int


class RequestLimits:
    def __init__(self, app: Any, limits: Limits) -> None:
        self.app = app
        self.limits = limits
        self.in_flight = 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1"):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limits.max_concurrent:
            await _reply(send, 429, f"too many requests in flight on this engine (at most {self.limits.max_concurrent}: "
                                    "explorer.rollout_model.openai_max_concurrent_requests); retry later")
            return
        self.in_flight += 1
        try:
            body = await _read_body(receive, self.limits.max_body_bytes)
            if body is None:
                await _reply(send, 413, f"request body over {self.limits.max_body_bytes} bytes "
                                        "(explorer.rollout_model.openai_max_request_bytes)")
                return
            if scope.get("method") == "POST" and scope["path"] in GENERATING:
                body, problem = _bounded_tokens(body, self.limits.max_tokens, scope["path"])
                if problem:
                    await _reply(send, 400, problem)
                    return
            await self.app(_with_length(scope, len(body)), _replay(body, receive), send)
        finally:
            self.in_flight -= 1


def _bounded_tokens(body: bytes, cap: int, path: str) -> tuple[bytes, str | None]:
    """The body with the token cap as its default; a problem when it asks for more than the cap."""
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        return body, None  # vLLM answers malformed JSON itself
    if not isinstance(request, dict):
        return body, None
    asked = [request[f] for f in TOKEN_FIELDS if isinstance(request.get(f), int)]
    if any(n > cap for n in asked):
        return body, (f"{'/'.join(TOKEN_FIELDS)} {max(asked)} is over this endpoint's cap of {cap} tokens "
                      "(explorer.rollout_model.openai_max_tokens)")
    if not asked:
        request["max_output_tokens" if path.endswith("/responses") else "max_tokens"] = cap
        return json.dumps(request).encode(), None
    return body, None


async def _read_body(receive: Any, limit: int) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def again() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # then the disconnect, when the client goes away

    return again


def _with_length(scope: dict, length: int) -> dict:
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}


async def _reply(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "request_limit", "code": status}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
