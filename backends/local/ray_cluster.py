"""The Ray cluster the local policy's actors live in: one namespace, joined once per process.

`cluster.ray_address` is one of
    local             a private single-node cluster, started by this process
    auto              the cluster of $RAY_ADDRESS or of the last `ray start` on this machine; else a local one
    host:port         the GCS address of a running cluster (`ray start --head --port ...`), joined as a driver
    ray://host:port   a cluster's Ray Client server (`--ray-client-server-port`, 10001 by default)

An address is probed over TCP before `ray.init` (a few seconds, a few attempts): a cluster that does not
answer fails the run at once with the address named, instead of Ray's own minutes of reconnecting.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from backends.errors import ConfigError, PartLost
from schemas.secrets import redact

# Every actor of every experiment lives here; names carry the experiment id.
NAMESPACE = "rft"
PROBE_TIMEOUT_S = 3.0  # per TCP connect
PROBE_ATTEMPTS = 3  # with a second between: ~10 s at most for a cluster that is down
# Ray Client starts a server process per driver; that start can fail once on a busy head ("Starting Ray client
# server failed") while the next one succeeds: a few more tries, then the error is the run's.
CLIENT_ATTEMPTS = 3
CLIENT_RETRY_S = 5.0

_joined: dict[str, str] = {}  # the address this process joined, for error messages


@dataclass(frozen=True)
class Address:
    """`cluster.ray_address` resolved: what ray.init gets, the host:port to probe (None: a local cluster
    is started) and the setting it came from."""

    init: str
    probe: str | None
    source: str = "cluster.ray_address"


def resolve(ray_address: str) -> Address:
    if ray_address == "local":
        return Address("local", None)
    if ray_address == "auto":
        env = os.environ.get("RAY_ADDRESS", "")
        if env and env not in ("auto", "local"):
            return Address(env, _host_port(env), "RAY_ADDRESS")
        from ray._private.services import find_bootstrap_address

        found = find_bootstrap_address(None)  # the last `ray start --head` on this machine
        if found and _answers(found, attempts=1):
            return Address(found, found)
        return Address("local", None)  # none running (or a stale record): start a local one
    return Address(ray_address, _host_port(ray_address))


def _host_port(address: str) -> str:
    """host:port of the address, without the user and password an address from the environment may carry
    (the probe connects to the host; they are Ray's to use, never printed)."""
    bare = address.removeprefix("ray://").rpartition("@")[2]
    host, _, port = bare.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            "cluster.ray_address", f"{redact(address)!r} is not 'local', 'auto', 'host:port' or 'ray://host:port'"
        )
    return bare


def _answers(host_port: str, attempts: int = PROBE_ATTEMPTS, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    host, _, port = host_port.rpartition(":")
    for attempt in range(attempts):
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return True
        except OSError:
            if attempt + 1 < attempts:
                time.sleep(1.0)
    return False


def probe(ray_address: str) -> str:
    """Check that the cluster of `ray_address` answers (nothing is started); returns a line to log."""
    address = resolve(ray_address)
    if address.probe is None:
        return f"Ray: a private local cluster is started for the run ({ray_address!r})"
    if not _answers(address.probe):
        raise ConfigError(
            address.source,
            f"no Ray cluster answers at {redact(address.init)} (TCP {address.probe}, {PROBE_ATTEMPTS} attempts, "
            f"{PROBE_TIMEOUT_S:.0f} s each); start it (`ray start --head --port ...`) or set "
            "cluster.ray_address to 'local'",
        )
    return f"Ray: the cluster at {redact(address.init)} answers"


def connect(ray_address: str = "auto") -> dict[str, float]:
    """Join the Ray cluster at `ray_address` (see the module docstring); returns its CPU / GPU / memory
    totals."""
    import ray

    if not ray.is_initialized():
        common: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": False, "logging_level": logging.WARNING}
        address = resolve(ray_address)
        if address.probe is None:
            # A private single-node cluster: no dashboard, whose processes would take CPU from the run.
            ray.init(address="local", include_dashboard=False, **common)
        else:
            probe(ray_address)
            _init_remote(address.init, common)
        _joined["address"] = address.init if address.probe else "local"
    return {k: float(v) for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU", "memory")}


def _init_remote(address: str, common: dict[str, Any]) -> None:
    import ray

    attempts = CLIENT_ATTEMPTS if address.startswith("ray://") else 1  # a GCS address has no per-driver server
    for attempt in range(1, attempts + 1):
        try:
            ray.init(address=address, **common)
            return
        except ConnectionAbortedError as err:  # Ray Client's "Initialization failure from server"
            if attempt == attempts:
                raise
            logging.getLogger(__name__).warning(
                "Ray Client at %s could not start this driver's server (attempt %d of %d): %s; retrying in %.0f s",
                redact(address), attempt, attempts, str(err).strip().splitlines()[-1], CLIENT_RETRY_S,
            )
            ray.shutdown()
            time.sleep(CLIENT_RETRY_S)


def joined_address() -> str:
    return _joined.get("address", "?")


def is_connected() -> bool:
    import ray

    return ray.is_initialized()


def cluster_gpus() -> int:
    """GPUs of the joined cluster; before joining, those of this machine (what a local cluster gets)."""
    import ray

    if not ray.is_initialized():
        from ray._private.accelerators import NvidiaGPUAcceleratorManager

        return NvidiaGPUAcceleratorManager.get_current_node_num_accelerators()
    return int(ray.cluster_resources().get("GPU", 0))


def alive_nodes() -> int:
    import ray

    return sum(1 for node in ray.nodes() if node.get("Alive"))


def get_actor(name: str) -> Any:
    """A named actor's handle; PartLost (a LookupError) when there is none."""
    import ray

    _still_joined()
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError as err:
        raise PartLost(f"no actor named {name!r} in Ray namespace {NAMESPACE!r}") from err


def has_actor(name: str) -> bool:
    try:
        get_actor(name)
    except LookupError:
        return False
    return True


def actor_names(prefix: str) -> list[str]:
    from ray.util import list_named_actors

    _still_joined()
    return sorted(
        a["name"] for a in list_named_actors(all_namespaces=True) if a["namespace"] == NAMESPACE and a["name"].startswith(prefix)
    )


def dump_timeline(path: str) -> None:
    """Ray's Chrome trace of the tasks and actor calls so far (open it in chrome://tracing or Perfetto)."""
    import ray

    ray.timeline(filename=path)


class ClusterLost(RuntimeError):
    """The Ray cluster the run joined stopped answering: nothing on it can be revived (not retried)."""


def answers() -> bool:
    """Whether the joined cluster still answers (a local one always does while this process runs)."""
    if not _joined_remote():
        return True
    address = joined_address()
    return _answers(resolve(address).probe or address, attempts=2, timeout_s=2.0)


def _joined_remote() -> bool:
    return joined_address() not in ("local", "?")


def _still_joined() -> None:
    """ClusterLost when this process joined a remote cluster and Ray Client has dropped with it: a lookup would
    have Ray auto-start a node of its own and fail obscurely."""
    import ray

    if not ray.is_initialized() and _joined_remote():
        raise _cluster_lost()


def check_cluster_alive() -> None:
    """Raise ClusterLost naming the address when the joined cluster stopped answering."""
    if not answers():
        raise _cluster_lost()


def _cluster_lost() -> ClusterLost:
    return ClusterLost(
        f"cluster.ray_address: the Ray cluster at {redact(joined_address())} stopped answering; the run cannot go on "
        "without it (retry the run once the cluster is back: it resumes from its latest checkpoint)"
    )
