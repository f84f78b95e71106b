"""Secrets come from a Prefect Secret block or the environment, never from parameters or configs.

Here, in the bottom layer beside the settings, because both the backends (to connect) and
checkpointing (to download a Tinker adapter for `rft convert`) need them; backends/registry.py names
which backend needs which.

The Tinker API key: the Prefect Secret block `tinker-api-key`, else $TINKER_API_KEY, else
$TRINITY_API_KEY (what Trinity-RFT's users already export). The Tinker address is no secret:
`trainer.base_url`, else $TINKER_BASE_URL, else the hosted service.
"""

from __future__ import annotations

import ipaddress
import os
import re
from urllib.parse import urlsplit

TINKER_SECRET_BLOCK = "tinker-api-key"
TINKER_ENV = "TINKER_API_KEY"
TINKER_ENVS = (TINKER_ENV, "TRINITY_API_KEY")
TINKER_URL_ENV = "TINKER_BASE_URL"
HOSTED_TINKER_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"  # the SDK's own default


class MissingSecretError(RuntimeError):
    pass


def tinker_api_key_with_source() -> tuple[str, str]:
    """The Tinker API key and where it came from, in words that can be logged (the key itself never is)."""
    try:
        from prefect.blocks.system import Secret

        return Secret.load(TINKER_SECRET_BLOCK).get(), f"the Prefect Secret block '{TINKER_SECRET_BLOCK}'"
    except (ValueError, ImportError):  # no such block (or no API to ask)
        pass
    for name in TINKER_ENVS:
        key = os.environ.get(name)
        if key:
            return key, f"${name}"
    raise MissingSecretError(
        f"the Tinker API key is missing: create the Prefect Secret block '{TINKER_SECRET_BLOCK}' "
        f"(prefect block create secret) or set {' or '.join(TINKER_ENVS)} in the worker's environment"
    )


def tinker_base_url_with_source(configured: str | None) -> tuple[str, str]:
    """The Tinker server's address and where it came from: `trainer.base_url`, else $TINKER_BASE_URL,
    else the hosted service."""
    if configured:
        return configured.rstrip("/"), "trainer.base_url"
    if os.environ.get(TINKER_URL_ENV):
        url = os.environ[TINKER_URL_ENV].rstrip("/")
        if problem := tinker_url_problem(url):
            raise MissingSecretError(f"${TINKER_URL_ENV}: {problem}")
        return url, f"${TINKER_URL_ENV}"
    return HOSTED_TINKER_URL, "the hosted service (neither trainer.base_url nor $TINKER_BASE_URL is set)"


ENV_PREFIX = "env:"
KEY_FIELD = "explorer.rollout_model.openai_api_key_secret"


def openai_api_key(source: str | None) -> str | None:
    """The OpenAI endpoint's API key from where `openai_api_key_secret` says (None: no key)."""
    if not source:
        return None
    if source.startswith(ENV_PREFIX):
        name = source.removeprefix(ENV_PREFIX)
        key = os.environ.get(name)
        if not key:
            raise MissingSecretError(f"{KEY_FIELD} {source!r}: ${name} is not set in the worker's environment")
        return key
    try:
        from prefect.blocks.system import Secret

        return str(Secret.load(source).get())
    except ValueError as err:
        raise MissingSecretError(f"{KEY_FIELD} {source!r}: no Prefect Secret block of that name "
                                 "(prefect block create secret), and no 'env:' prefix") from err


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")
_SECRET_QUERY = re.compile(r"(?i)([?&](?:password|passwd|pwd|token|access_token|api_key|apikey|key|secret)=)[^&#\s]+")


def redact(text: str) -> str:
    """`text` with the user and password of every URI in it, and secret-looking query values, replaced by
    `***` (MLflow, Ray and Tinker addresses may carry them); use on everything printed or recorded."""
    text = _CREDENTIALS.sub(lambda m: f"{m['scheme']}***@", str(text))
    return _SECRET_QUERY.sub(lambda m: f"{m[1]}***", text)


def without_credentials(url: str) -> str:
    """`url` without its user and password (to probe it: urllib cannot send them, and its error would print them)."""
    return _CREDENTIALS.sub(lambda m: m["scheme"], url)


def plain_http_remote(url: str) -> bool:
    """True when `url` is plain http to a host beyond this machine (a key sent there crosses the network
    readable by anyone on the way)."""
    parts = urlsplit(url)
    return parts.scheme == "http" and not is_loopback(parts.hostname or "")


PLAIN_HTTP_ENV = "TINKER_PLAIN_HTTP_HOST"


def tinker_url_problem(url: str) -> str | None:
    """Why the Tinker key must not go to `url`, or None: plain http beyond this machine sends the key readable
    to everyone on the way, unless the user names that host in $TINKER_PLAIN_HTTP_HOST."""
    if not plain_http_remote(url):
        return None
    host = urlsplit(url).hostname or ""
    if os.environ.get(PLAIN_HTTP_ENV, "").strip().lower() == host.lower():
        return None
    return (f"{redact(url)!r} is plain http to another machine: the Tinker API key would cross the network unencrypted. "
            f"Use https, or name the host in ${PLAIN_HTTP_ENV}={host} to send it there anyway")
