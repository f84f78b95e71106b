"""trainer.max_checkpoints_to_keep: the older whole checkpoints are deleted once a newer one is whole."""

from __future__ import annotations

import shutil
from pathlib import Path

from checkpointing import layout


def prune_checkpoints(exp: Path, keep: int | None, current: int) -> list[int]:
    """Delete all but the newest `keep` whole checkpoints, never `current` (None: keep all); returns the deleted
    steps. Called only after `current` is whole and the markers name it, so there is always one to resume from.
    Each is renamed first: a deletion cut short leaves no half folder named global_step_N."""
    if keep is None:
        return []
    old = [step for step in layout.complete_steps(exp)[:-keep] if step != current]
    for step in old:
        doomed = layout.deleting_step_dir(exp, step)
        shutil.rmtree(doomed, ignore_errors=True)  # what an earlier deletion left
        layout.step_dir(exp, step).rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return old
