"""Pre-flight checks that must run on each Ray node, not on the driver's machine: is the model there (or can it
be made there), and does /dev/shm hold what the engines serve from.

Engines serve their weights from a folder under /dev/shm (backends.local.weight_sync.SHM_ROOT); a container's
/dev/shm is often 64 MB, and a sync into it then fails with "No space left on device" minutes into a run.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import Any

from backends.errors import ConfigError
from checkpointing.models import local_model_folder

CHECK_TIMEOUT_S = 300.0  # converting the embedded model on a node takes ~10 s; a node that does not answer is named


def model_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def check_this_node(model_dir: str, model_id: str, shm_root: str) -> list[str]:
    """What is wrong on the node this runs on: the model folder, or /dev/shm too small for a copy of its weights
    beside the one an engine serves (a sync writes the new weights before the old ones go)."""
    host = socket.gethostname()
    try:
        folder = local_model_folder(model_dir, model_id)
    except Exception as err:  # noqa: BLE001  a missing folder, a missing package: each named per node
        return [f"{host}: {err}"]
    if not folder.is_dir():
        return []  # a hub id: each engine downloads it
    root = Path(shm_root)
    existing = next((p for p in (root, *root.parents) if p.exists()), Path("/"))
    free, needed = shutil.disk_usage(existing).free, 2 * model_bytes(folder)
    if free < needed:
        return [f"{host}: {existing} has {free / 2**20:.0f} MiB free, and the engines' weights need {needed / 2**20:.0f} "
                f"MiB there (the model's {needed / 2**21:.0f} MiB twice); give the container more shared memory "
                "(docker run --shm-size=16g, or a Kubernetes emptyDir with medium: Memory on /dev/shm)"]
    return []


def check_every_node(model_dir: str, model_id: str, shm_root: str) -> None:
    """check_this_node on every alive node of the joined cluster (here only, for a cluster not started yet)."""
    import ray

    if not ray.is_initialized():
        problems = check_this_node(model_dir, model_id, shm_root)
    else:
        problems = [p for found in _on_each_node(model_dir, model_id, shm_root) for p in found]
    if problems:
        raise ConfigError("model.model_path", "not every Ray node can serve the model:\n  " + "\n  ".join(problems))


def _on_each_node(model_dir: str, model_id: str, shm_root: str) -> list[list[str]]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    check: Any = ray.remote(num_cpus=0)(check_this_node)
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    refs = [check.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
            .remote(model_dir, model_id, shm_root) for node in nodes]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=CHECK_TIMEOUT_S)
    found = []
    for node, ref in zip(nodes, refs, strict=True):
        if ref not in ready:
            found.append([f"{node.get('NodeManagerHostname', node['NodeID'][:12])}: did not answer the check within "
                          f"{CHECK_TIMEOUT_S:.0f} s"])
            continue
        found.append(ray.get(ref))
    return found
