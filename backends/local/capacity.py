"""What the joined Ray cluster can still hold, and waits on it that end.

Ray queues an actor or a placement group that no node can hold and waits for one forever: a run on a
cluster whose GPUs the engines took, or a trainer asking for more GPUs on one node than any node has,
would hang with nothing said. Every start here first checks its request against what each node has
free (refused at once, naming the request and the cluster), then waits at most `start_timeout_s()`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from backends.errors import ConfigError

# How long an actor may take to start once Ray could place it (a large model loads for minutes on a GPU node);
# RFT_START_TIMEOUT_S overrides it (tests use seconds).
DEFAULT_START_TIMEOUT_S = 1800.0


def gpus_compute() -> bool:
    """Whether the GPUs Ray declares are computed on. RFT_PLACEHOLDER_GPUS=1: Ray's GPUs only place the actors
    (`ray start --num-gpus 4` on a machine without any) and every device stays CPU; how the placement, the resource
    plan and veRL's worker groups of a GPU cluster are tested on CPU machines (docs/gpu.md)."""
    return os.environ.get("RFT_PLACEHOLDER_GPUS", "0") != "1"


def start_timeout_s() -> float:
    return float(os.environ.get("RFT_START_TIMEOUT_S", DEFAULT_START_TIMEOUT_S))


def free_gpus_per_node() -> list[float]:
    """GPUs each alive node of the joined cluster has free now, largest first. Through Ray Client (ray://) Ray's
    per-node view is not served: each node's total stands in, and Ray's own wait (bounded) decides."""
    try:
        from ray._private.state import available_resources_per_node

        free = available_resources_per_node().values()
    except Exception:  # noqa: BLE001  a Ray Client driver
        return total_gpus_per_node()
    return sorted((float(r.get("GPU", 0.0)) for r in free), reverse=True)


def total_gpus_per_node() -> list[float]:
    """GPUs each alive node of the joined cluster has, largest first."""
    import ray

    return sorted((float(n["Resources"].get("GPU", 0.0)) for n in ray.nodes() if n.get("Alive")), reverse=True)


def fits(each: float, count: int, free: Sequence[float]) -> bool:
    """Whether `count` requests of `each` GPUs, each on one node, fit in nodes with `free` GPUs (largest first)."""
    if each <= 0 or count <= 0:
        return True
    left = sorted(free, reverse=True)
    for _ in range(count):
        node = next((i for i, gpus in enumerate(left) if gpus >= each - 1e-9), None)
        if node is None:
            return False
        left[node] -= each
    return True


def describe(free: Sequence[float], total: Sequence[float]) -> str:
    nodes = ", ".join(f"{f:g} of {t:g}" for f, t in zip(free, total, strict=False))
    return f"{len(total)} node(s) with GPUs free: {nodes or 'none'}"


def require_gpus(field: str, what: str, each: float, count: int) -> None:
    """ConfigError naming `field` when `count` × `each` GPUs (each request on one node) cannot be placed now."""
    if each <= 0 or count <= 0:
        return
    free = free_gpus_per_node()
    if not fits(each, count, free):
        raise ConfigError(field, f"{what} ask(s) for {count} × {each:g} GPU(s), each on one node, but the Ray cluster "
                                 f"has {describe(free, total_gpus_per_node())}")


def wait_started(refs: Sequence[Any], what: str, asked: str, on_timeout: Any = None) -> list[Any]:
    """ray.get(refs) for at most start_timeout_s(); past it, `on_timeout()` (kill what was started) and an error
    naming what was asked for and what the cluster has."""
    import ray
    from ray.exceptions import GetTimeoutError

    timeout = start_timeout_s()
    try:
        return ray.get(list(refs), timeout=timeout)
    except GetTimeoutError:
        if on_timeout is not None:
            on_timeout()
        raise TimeoutError(
            f"{what} did not start within {timeout:.0f} s (RFT_START_TIMEOUT_S): asked for {asked}; the Ray cluster has "
            f"{describe(free_gpus_per_node(), total_gpus_per_node())}"
        ) from None
