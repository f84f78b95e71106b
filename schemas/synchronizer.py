"""`synchronizer`: how and when trained weights reach the rollout engines."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from schemas.base import Section
from schemas.trinity.names import SYNC_METHOD_ALIASES, SYNC_STYLE_ALIASES, SYNC_STYLES_NOT_BUILT


class SynchronizerConfig(Section):
    """Weight synchronisation between trainer and explorer."""

    sync_method: Literal["nccl", "checkpoint", "memory"] = Field(
        "nccl",
        description="nccl: trainer rank 0 broadcasts into the running engines, over NCCL on GPUs and gloo on CPU; "
        "checkpoint: engines load the saved checkpoint; memory: "
        "the trainer writes safetensors into the engines' model folder and they reload (CPU, one node). "
        "Trinity aliases: online → nccl, offline → checkpoint.",
    )
    sync_style: Literal["fixed", "explorer_driven", "trainer_driven"] = Field(
        "fixed",
        description="fixed: sync every sync_interval steps; explorer_driven/trainer_driven: the named side "
        "decides when (Trinity aliases: dynamic_by_explorer, dynamic_by_trainer; Trinity's fully_async is refused, "
        "with why).",
    )
    sync_interval: int = Field(1, ge=1, description="Explore steps between two weight syncs.")
    sync_offset: int = Field(
        0, ge=0, description="Explore steps the explorer runs ahead before the first sync (0: strictly on-policy)."
    )
    sync_timeout: int = Field(3600, ge=1, description="Seconds to wait for a sync before failing.")

    @model_validator(mode="before")
    @classmethod
    def _trinity_aliases(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if isinstance(data.get("sync_method"), str):
                data["sync_method"] = SYNC_METHOD_ALIASES.get(data["sync_method"].lower(), data["sync_method"].lower())
            if isinstance(data.get("sync_style"), str):
                data["sync_style"] = SYNC_STYLE_ALIASES.get(data["sync_style"].lower(), data["sync_style"].lower())
        return data

    @field_validator("sync_style", mode="before")
    @classmethod
    def _not_built(cls, value: Any) -> Any:
        if isinstance(value, str) and value in SYNC_STYLES_NOT_BUILT:
            raise ValueError(f"{value!r}: {SYNC_STYLES_NOT_BUILT[value]}")
        return value


def takes_turns(sync_style: str, sync_offset: int) -> bool:
    """Explorer and trainer never run at once (explore → train → sync): only `fixed` at offset 0; a driven
    style lets the explorer go on with the weights it has, so its sides overlap whatever the offset. The
    schedule (backends/schedule.py) asks this."""
    return sync_style == "fixed" and sync_offset == 0
