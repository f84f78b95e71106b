"""Reaching a Tinker server: where it is, the key, a fast preflight, and bounded waits.

The `tinker` SDK retries connection errors, timeouts and 5xx answers for up to ~5 minutes before it
raises, and blocks in its constructor while it does (measured, notes in scripts/tinker_server/README.md).
So before the SDK is touched a plain httpx request with short timeouts checks that the server answers,
accepts the key and serves the base model; every SDK future is then waited on with a time limit.

The key is read from a Prefect Secret block or the environment (schemas.secrets) and never leaves
this module but in request headers: no message, log line or exception here contains it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import httpx

from schemas.secrets import redact, tinker_api_key_with_source, tinker_base_url_with_source

# Longest wait for one Tinker call (a JAX compile on the local server takes up to a minute; long
# sampling batches on CPU take minutes); override with $RFT_TINKER_TIMEOUT_S.
DEFAULT_TIMEOUT_S = 900.0
PREFLIGHT_TIMEOUT = httpx.Timeout(15.0, connect=5.0)
KEY_PREFIX = "tml-"  # the SDK refuses other keys (at its first request)
LOCAL_SERVER_NAME = "Tinker API Mock"  # what skyrl's tinker API (scripts/tinker-server.sh) answers at "/"


class TinkerUnavailableError(RuntimeError):
    """The Tinker server cannot be used: unreachable, the key refused, or the model not served."""


class TinkerTimeoutError(TimeoutError):
    """A Tinker call did not finish within the time limit."""


@dataclass(frozen=True)
class Endpoint:
    """A Tinker server and the key to use with it (the key is left out of repr)."""

    base_url: str
    url_source: str
    key_source: str
    api_key: str = field(repr=False)

    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.api_key}


@dataclass(frozen=True)
class ServerInfo:
    """What the preflight learnt about the server."""

    models: tuple[str, ...]
    # Hosted Tinker: a SamplingClient samples the weights it was made from, whatever trains meanwhile.
    # The local skyrl server loads sampler weights into the training model's own LoRA slot, so an older
    # sampling client samples (or, once another was used, restores) the training weights.
    snapshots: bool

    @property
    def kind(self) -> str:
        return "hosted-compatible (sampling clients are snapshots)" if self.snapshots else (
            "local skyrl server (sampling clients share the training model's LoRA slot)")


def endpoint(base_url: str | None) -> Endpoint:
    """The endpoint of `trainer.base_url` (else $TINKER_BASE_URL, else hosted) with the configured key."""
    url, url_source = tinker_base_url_with_source(base_url)
    key, key_source = tinker_api_key_with_source()
    if not key.startswith(KEY_PREFIX):
        raise TinkerUnavailableError(
            f"the Tinker API key from {key_source} does not start with {KEY_PREFIX!r}, which the tinker SDK "
            "requires (any tml-... key works against scripts/tinker-server.sh)"
        )
    return Endpoint(base_url=url, url_source=url_source, key_source=key_source, api_key=key)


def timeout_s() -> float:
    return float(os.environ.get("RFT_TINKER_TIMEOUT_S", DEFAULT_TIMEOUT_S))


def preflight(ep: Endpoint, base_model: str | None = None) -> ServerInfo:
    """Within seconds: the server answers, takes the key and (when given) serves `base_model`."""
    where = f"{redact(ep.base_url)} (from {ep.url_source})"
    try:
        with httpx.Client(base_url=ep.base_url, headers=ep.headers(), timeout=PREFLIGHT_TIMEOUT) as client:
            answer = client.get("/api/v1/get_server_capabilities")
            if answer.status_code in (401, 403):
                raise TinkerUnavailableError(
                    f"the Tinker server at {where} rejected the API key from {ep.key_source} (HTTP {answer.status_code})"
                )
            if answer.status_code != 200:
                raise TinkerUnavailableError(
                    f"the Tinker server at {where} answered HTTP {answer.status_code} to get_server_capabilities"
                )
            models = tuple(m["model_name"] for m in answer.json().get("supported_models", []))
            snapshots = _serves_snapshots(client)
    except httpx.HTTPError as exc:
        raise TinkerUnavailableError(
            f"the Tinker server is not reachable at {where} (API key from {ep.key_source}): {type(exc).__name__}: "
            f"{exc}. Start a local one with "
            "scripts/tinker-server.sh start (it prints the TINKER_BASE_URL to export), or set "
            "trainer.base_url / $TINKER_BASE_URL"
        ) from None
    if base_model is not None and models and base_model not in models:
        raise TinkerUnavailableError(
            f"trainer.base_model {base_model!r} is not served by the Tinker server at {where}; it serves: "
            f"{', '.join(models)}"
        )
    return ServerInfo(models=models, snapshots=snapshots)


def _serves_snapshots(client: httpx.Client) -> bool:
    try:
        root = client.get("/")
        return not (root.status_code == 200 and root.json().get("name") == LOCAL_SERVER_NAME)
    except (httpx.HTTPError, ValueError, AttributeError):
        return True


def service_client(ep: Endpoint) -> Any:
    """A tinker.ServiceClient (a session of its own); call only after `preflight` succeeded."""
    import tinker

    return tinker.ServiceClient(base_url=ep.base_url, api_key=ep.api_key)


def wait(future: Any, what: str, ep: Endpoint | None = None) -> Any:
    """`future.result()` within the time limit, failing with what was waited for and where."""
    limit = timeout_s()
    try:
        return future.result(timeout=limit)
    except TimeoutError:
        where = f" at {redact(ep.base_url)}" if ep else ""
        raise TinkerTimeoutError(
            f"{what}: no answer from the Tinker server{where} within {limit:.0f} s ($RFT_TINKER_TIMEOUT_S)"
        ) from None


def unload_model(ep: Endpoint, model_id: str) -> None:
    """Free a training model's slot on the server at once (best effort: the server also unloads it
    when its session stops sending heartbeats)."""
    try:
        with httpx.Client(base_url=ep.base_url, headers=ep.headers(), timeout=PREFLIGHT_TIMEOUT) as client:
            client.post("/api/v1/unload_model", json={"model_id": model_id})
    except httpx.HTTPError:
        pass
