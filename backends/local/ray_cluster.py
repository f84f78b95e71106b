"""The Ray cluster the local policy's actors live in: one namespace, joined once per process."""

from __future__ import annotations

import logging
from typing import Any

# Every actor of every experiment lives here; names carry the experiment id.
NAMESPACE = "rft"


def connect(ray_address: str = "auto") -> dict[str, float]:
    """Join the Ray cluster at `ray_address` ("auto": a running one, else a new local one; "local":
    always a private one); returns its CPU / GPU / memory totals."""
    import ray

    if not ray.is_initialized():
        common: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": False, "logging_level": logging.WARNING}
        if ray_address == "auto":
            try:
                ray.init(address="auto", **common)
            except ConnectionError:  # no cluster running: start a local one below
                ray_address = "local"
        if ray_address == "local":
            # A private single-node cluster: no dashboard, whose processes would take CPU from the run.
            ray.init(address="local", include_dashboard=False, **common)
        elif not ray.is_initialized():
            ray.init(address=ray_address, **common)
    return {k: float(v) for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU", "memory")}


def is_connected() -> bool:
    import ray

    return ray.is_initialized()


def cluster_gpus() -> int:
    import ray

    return int(ray.cluster_resources().get("GPU", 0))


def get_actor(name: str) -> Any:
    """A named actor's handle; LookupError when there is none."""
    import ray

    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError as err:
        raise LookupError(f"no actor named {name!r} in Ray namespace {NAMESPACE!r}") from err


def actor_names(prefix: str) -> list[str]:
    from ray.util import list_named_actors

    return sorted(
        a["name"] for a in list_named_actors(all_namespaces=True) if a["namespace"] == NAMESPACE and a["name"].startswith(prefix)
    )


def alive_nodes() -> int:
    import ray

    return sum(1 for node in ray.nodes() if node.get("Alive"))


def dump_timeline(path: str) -> None:
    """Ray's Chrome trace of the tasks and actor calls so far (open it in chrome://tracing or Perfetto)."""
    import ray

    ray.timeline(filename=path)
