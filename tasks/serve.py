"""Serve: which weights to serve, and where the engines' OpenAI endpoints listen."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from backends.policy import policy_for
from checkpointing import layout
from checkpointing.layout import experiment_dir
from schemas import ExperimentConfig


def latest_checkpoint(config: ExperimentConfig) -> int | None:
    """The step of the experiment's latest complete checkpoint, or None when it has none."""
    return layout.latest_step(experiment_dir(config))


@task(name="endpoints", retries=2, retry_delay_seconds=3, cache_policy=NO_CACHE)
def endpoints(config: ExperimentConfig) -> list[str]:
    """The base URL of every engine's OpenAI-compatible endpoint."""
    urls = [engine.openai_base_url() for engine in policy_for(config).engines()]
    if not all(urls):
        raise RuntimeError("an engine runs without its OpenAI endpoint (explorer.rollout_model.enable_openai_api)")
    return [str(u) for u in urls]


@task(name="check-engines", cache_policy=NO_CACHE)
def check_engines(config: ExperimentConfig) -> None:
    """Raise when an engine stopped answering (a serve run then fails instead of serving nothing)."""
    for engine in policy_for(config).engines():
        info = engine.info()
        if not info.get("openai_base_url"):
            raise RuntimeError(f"engine {info.get('name')} lost its OpenAI endpoint")
    get_run_logger().debug("engines answer")
