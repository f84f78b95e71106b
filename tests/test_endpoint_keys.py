"""The OpenAI endpoint: a key beyond loopback (read from a Prefect Secret block or the environment, never a
setting), bounded requests, and the key kept out of reprs and vLLM's server arguments. The endpoint itself
under load, with the key, is benchmarks/serve_load.py (tests/test_serve_load.py)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict

import httpx
import pytest
from pydantic import ValidationError

from backends.local.request_limits import Limits, RequestLimits
from deployments import load_recipe
from schemas import describe_errors
from schemas.secrets import MissingSecretError, openai_api_key

HOST = "explorer.rollout_model.openai_api_host"


def endpoint(**settings: object):
    overrides = {"explorer.rollout_model.enable_openai_api": True}
    overrides |= {f"explorer.rollout_model.{k}": v for k, v in settings.items()}
    return load_recipe("smoke").with_overrides(overrides)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.com"])
def test_binding_beyond_loopback_without_a_key_is_refused(host: str) -> None:
    with pytest.raises(ValidationError) as err:
        endpoint(openai_api_host=host)
    assert any(line.startswith(f"{HOST}: ") and "openai_api_key_secret" in line for line in describe_errors(err.value))


def test_serve_mode_beyond_loopback_needs_a_key_too() -> None:
    with pytest.raises(ValidationError) as err:
        load_recipe("smoke").with_overrides({"mode": "serve", HOST: "0.0.0.0"})
    assert any(line.startswith(f"{HOST}: ") for line in describe_errors(err.value))


def test_a_key_opens_other_interfaces_and_loopback_needs_none() -> None:
    assert endpoint(openai_api_host="0.0.0.0", openai_api_key_secret="env:RFT_API_KEY").explorer.rollout_model.openai_api_host == "0.0.0.0"
    assert endpoint(openai_api_host="127.0.0.1").explorer.rollout_model.openai_api_key_secret is None


def test_the_key_comes_from_the_environment_or_a_secret_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RFT_TEST_KEY", "sk-test-123")
    assert openai_api_key("env:RFT_TEST_KEY") == "sk-test-123"
    assert openai_api_key(None) is None
    monkeypatch.delenv("RFT_TEST_KEY")
    with pytest.raises(MissingSecretError, match="openai_api_key_secret 'env:RFT_TEST_KEY'"):
        openai_api_key("env:RFT_TEST_KEY")


def test_a_missing_key_fails_before_anything_starts_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.registry import secret_sources

    config = endpoint(openai_api_host="0.0.0.0", openai_api_key_secret="env:RFT_TEST_KEY")
    monkeypatch.delenv("RFT_TEST_KEY", raising=False)
    with pytest.raises(MissingSecretError, match="explorer.rollout_model.openai_api_key_secret"):
        secret_sources(config)
    monkeypatch.setenv("RFT_TEST_KEY", "sk-test-123")
    lines = secret_sources(config)
    assert any("env:RFT_TEST_KEY" in line for line in lines) and not any("sk-test-123" in line for line in lines)


def test_the_key_stays_out_of_reprs_and_argument_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.local.openai_server import ServerSettings
    from backends.local.vllm_engine import EngineSettings

    monkeypatch.setenv("RFT_TEST_KEY", "sk-test-123")
    config = endpoint(openai_api_host="0.0.0.0", openai_api_key_secret="env:RFT_TEST_KEY")
    settings = EngineSettings.from_config(config, "/models/x")
    assert settings.openai_api_key == "sk-test-123"
    assert "sk-test-123" not in repr(settings) and "sk-test-123" not in repr(ServerSettings(api_key="sk-test-123"))
    assert "sk-test-123" not in json.dumps(config.model_dump(mode="json"))  # params, MLflow, artifacts
    assert asdict(settings)["openai_max_tokens"] == config.model.max_response_tokens


async def _echo(scope: dict, receive, send) -> None:  # noqa: ANN001
    """Answers with the body it received (what vLLM's app would get) after a short while."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await asyncio.sleep(0.2)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body or b"{}"})


def test_requests_are_bounded() -> None:
    app = RequestLimits(_echo, Limits(max_concurrent=2, max_body_bytes=2048, max_tokens=64))

    async def scenario() -> dict:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            chat = "/v1/chat/completions"
            default = await client.post(chat, json={"messages": []})
            over = await client.post(chat, json={"messages": [], "max_tokens": 65})
            big = await client.post(chat, content=b"x" * 4096)
            burst = await asyncio.gather(*(client.post(chat, json={"messages": [], "max_tokens": 8}) for _ in range(5)))
            health = await client.get("/health")
        return {"default": default, "over": over, "big": big, "burst": burst, "health": health}

    r = asyncio.run(scenario())
    assert r["default"].status_code == 200 and r["default"].json()["max_tokens"] == 64  # the cap is the default
    assert r["over"].status_code == 400 and "openai_max_tokens" in r["over"].text
    assert r["big"].status_code == 413
    codes = sorted(resp.status_code for resp in r["burst"])
    assert codes == [200, 200, 429, 429, 429]
    assert r["health"].status_code == 200
