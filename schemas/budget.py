"""`budget`: limits at which a run stops cleanly (a checkpoint, the summary marked, a Prefect state that
says why); a resume under a larger budget, or none, continues to the planned steps."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from schemas.base import Entry, Section, honoured
from schemas.stage_kind import stage_kind

NO_BUDGET_CHECK = ("only a stage that trains (mode 'both', 'colocate' or 'train') keeps the usage ledger and stops at a "
                   "budget; an 'explore' run stops when its trainer does, 'bench' and 'serve' run to the end")
SFT_SAMPLES_NO_TOKENS = ("a stage that learns from a dataset (sft, dpo) samples no tokens: budget.max_tokens "
                         "(tokens sampled) never stops it; budget.max_wall_minutes does")
NO_GPUS_COUNTED = ("the run holds no GPUs (cluster.gpu_per_node 0, or a service such as Tinker trains and samples): "
                   "its GPU seconds stay 0 and budget.max_gpu_hours never stops it; budget.max_wall_minutes or "
                   "budget.max_tokens does")


def _unchecked(value: Any, c: Any) -> bool:
    """Set, in a stage that keeps no usage ledger (colocate keeps one: it runs flows/rl.py)."""
    return value is not None and not stage_kind(c).keeps_ledger


def _no_tokens_sampled(value: Any, c: Any) -> bool:
    """Set, in a stage that learns from a dataset (sft, dpo), not from rollouts."""
    return value is not None and stage_kind(c).from_dataset


def _no_gpus_held(value: Any, c: Any) -> bool:
    return value is not None and (c.cluster.gpu_per_node == 0 or not c.explorer.rollout_model.HOLDS_GPUS)


class BudgetConfig(Section):
    """What a run may use; None: no limit. Counted over the experiment, resumes included."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "max_tokens": honoured().warn_if(_unchecked, NO_BUDGET_CHECK).warn_if(_no_tokens_sampled, SFT_SAMPLES_NO_TOKENS),
        "max_wall_minutes": honoured().warn_if(_unchecked, NO_BUDGET_CHECK),
        "max_gpu_hours": honoured().warn_if(_unchecked, NO_BUDGET_CHECK).warn_if(_no_gpus_held, NO_GPUS_COUNTED),
    }

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
