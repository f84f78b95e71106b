"""Policy-loss registry.

Every policy loss has the signature ``fn(inputs: LossInputs, args: dict) -> (loss, metrics)`` where
``loss`` is a scalar tensor already aggregated with ``args["loss_agg_mode"]`` and ``metrics`` holds
floats, at least ``pg_loss``.
"""

from __future__ import annotations

from algorithms.registry import Registry

POLICY_LOSS_FNS = Registry("algorithm.policy_loss_fn")
register_policy_loss_fn = POLICY_LOSS_FNS.register


def strip_prefix(metrics: dict[str, float]) -> dict[str, float]:
    """veRL names its metrics ``actor/pg_clipfrac`` etc.; we report the bare names."""
    return {key.removeprefix("actor/"): float(value) for key, value in metrics.items()}
