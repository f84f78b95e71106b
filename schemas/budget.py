"""`budget`: limits at which a run stops cleanly (a checkpoint, the summary marked, a Prefect state that
says why); a resume under a larger budget, or none, continues to the planned steps."""

from __future__ import annotations

from pydantic import Field

from schemas.base import Section


class BudgetConfig(Section):
    """What a run may use; None: no limit. Counted over the experiment, resumes included."""

    max_tokens: int | None = Field(
        None, ge=1, description="Stop after the step at which the tokens sampled by the rollouts reach this many."
    )
    max_wall_minutes: float | None = Field(
        None, gt=0, description="Stop after the step at which the steps' wall time reaches this many minutes."
    )
    max_gpu_hours: float | None = Field(
        None, gt=0, description="Stop after the step at which the GPU seconds of the sides (the GPUs each side holds "
        "× its seconds in the step) reach this many hours. Never reached without GPUs (on CPU, or on Tinker's service).",
    )
