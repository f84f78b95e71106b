"""`cluster`: the Ray cluster the experiment runs on."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from schemas.base import Entry, Section, honoured


class ClusterConfig(Section):
    """Where the experiment runs."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "node_num": honoured(note="check-requirements: Ray must have that many nodes")}

    node_num: int | None = Field(None, ge=1, description="Number of nodes; None: detected from Ray at start.")
    gpu_per_node: int | None = Field(
        None, ge=0, description="GPUs per node (0: CPU only); None: detected from Ray at start."
    )
    ray_address: str = Field(
        "auto",
        description="'auto': join the running Ray cluster, or start a local one when none runs; 'local': always "
        "start a private local one; otherwise the address of the cluster to join (e.g. 'ray://host:10001').",
    )
