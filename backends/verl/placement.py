"""Where veRL's GPU workers go: equal groups, one per node, placed within a bound.

veRL takes a list of processes per node and makes one STRICT_PACK placement group of it per entry, but it
reads the first entry as every group's size (`local_world_size`, single_controller/ray/base.py) and asserts
that each group holds it: an uneven list such as [2, 1] fails, and a group larger than any node's free GPUs
waits forever. So the layout here is `m` groups of `k` GPUs on `m` nodes that have `k` free now (after the
engines took theirs), the layout with the most GPUs; and the groups are made here and waited for at most
`placement_timeout_s()`, then handed to veRL's resource pool.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from backends.errors import ConfigError
from backends.local import capacity

logger = logging.getLogger(__name__)

DEFAULT_PLACEMENT_TIMEOUT_S = 300.0  # once the GPUs are free, a placement group is ready in seconds


def placement_timeout_s() -> float:
    return float(os.environ.get("RFT_PLACEMENT_TIMEOUT_S", DEFAULT_PLACEMENT_TIMEOUT_S))


def worker_layout(wanted: int, free: Sequence[float]) -> list[int]:
    """Processes per node for at most `wanted` one-GPU workers, given each node's free GPUs: `m` equal groups of
    `k` on `m` different nodes, the most GPUs in all (a larger `k` on a tie: fewer nodes to talk across)."""
    best: tuple[int, int] | None = None
    for k in range(1, wanted + 1):
        nodes = sum(1 for gpus in free if gpus >= k - 1e-9)
        m = min(nodes, wanted // k)
        if m and (best is None or k * m >= best[0] * best[1]):
            best = (k, m)
    if best is None:
        raise ConfigError("cluster.gpu_per_node", f"the veRL trainer needs GPUs for its workers, but no node of the Ray "
                                                  f"cluster has one free ({capacity.describe(free, free)})")
    k, m = best
    return [k] * m


def ready_pool(layout: list[int]) -> Any:
    """veRL's RayResourcePool for `layout` with its placement groups made and ready, or an error naming what was
    asked for and what the cluster has (the groups removed) after placement_timeout_s()."""
    import ray
    from ray.exceptions import GetTimeoutError
    from ray.util.placement_group import placement_group
    from verl.single_controller.ray import RayResourcePool
    from verl.single_controller.ray.base import sort_placement_group_by_node_ip

    pool = RayResourcePool(process_on_nodes=layout, use_gpu=True, max_colocate_count=1)
    bundle = {"CPU": pool.max_colocate_count, "GPU": 1}  # what veRL's own groups hold: a worker asks for both
    groups = [placement_group([dict(bundle) for _ in range(k)], strategy="STRICT_PACK", name=f"{pool.name_prefix}rft:{i}")
              for i, k in enumerate(layout)]
    timeout = placement_timeout_s()
    try:
        ray.get([group.ready() for group in groups], timeout=timeout)
    except GetTimeoutError:
        free = capacity.free_gpus_per_node()
        for group in groups:
            ray.util.remove_placement_group(group)
        raise TimeoutError(
            f"the veRL trainer's placement groups ({' + '.join(map(str, layout))} GPUs, one group per node) were not "
            f"ready within {timeout:.0f} s (RFT_PLACEMENT_TIMEOUT_S); the Ray cluster has "
            f"{capacity.describe(free, capacity.total_gpus_per_node())}"
        ) from None
    pool.pgs = sort_placement_group_by_node_ip(groups)
    _warn_if_shared(groups)
    return pool


def _warn_if_shared(groups: Sequence[Any]) -> None:
    """veRL numbers a group's workers 0..k-1 on its node: two groups on one node would share local ranks."""
    from ray.util import placement_group_table

    nodes = [next(iter(placement_group_table(group)["bundles_to_node_id"].values()), None) for group in groups]
    if len(set(nodes)) < len(nodes):
        logger.warning("two of the veRL trainer's placement groups landed on one node (%s); veRL expects one a node", nodes)
