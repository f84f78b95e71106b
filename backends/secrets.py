"""Secrets come from a Prefect Secret block or the environment, never from parameters or configs."""

from __future__ import annotations

import os

TINKER_SECRET_BLOCK = "tinker-api-key"
TINKER_ENV = "TINKER_API_KEY"


class MissingSecretError(RuntimeError):
    pass


def tinker_api_key_with_source() -> tuple[str, str]:
    """The Tinker API key (the Prefect Secret block `tinker-api-key`, else $TINKER_API_KEY) and where it
    came from, in words that can be logged (the key itself never is)."""
    try:
        from prefect.blocks.system import Secret

        return Secret.load(TINKER_SECRET_BLOCK).get(), f"the Prefect Secret block '{TINKER_SECRET_BLOCK}'"
    except (ValueError, ImportError):  # no such block (or no API to ask)
        pass
    key = os.environ.get(TINKER_ENV)
    if key:
        return key, f"${TINKER_ENV}"
    raise MissingSecretError(
        f"the Tinker API key is missing: create the Prefect Secret block '{TINKER_SECRET_BLOCK}' "
        f"(prefect block create secret) or set {TINKER_ENV} in the worker's environment"
    )
