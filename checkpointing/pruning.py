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
        folder = _own_folder(exp, layout.step_dir(exp, step))
        doomed = layout.deleting_step_dir(exp, step)
        if doomed.exists() or doomed.is_symlink():  # what an earlier deletion left
            _remove(exp, doomed)
        folder.rename(doomed)
        _remove(exp, doomed)
    return old


def remove_leftovers(exp: Path) -> list[Path]:
    """Delete the `.global_step_N.deleting` folders a deletion cut short left (called when a stage
    starts); returns them."""
    if not exp.is_dir():
        return []
    found = sorted(p for p in exp.iterdir() if layout.DELETING_DIR.match(p.name))
    for path in found:  # all checked before any is deleted
        _own_folder(exp, path)
    for path in found:
        _remove(exp, path)
    return found


def _own_folder(exp: Path, path: Path) -> Path:
    """`path` when it is a real folder of the experiment: a symlink, or anything resolving outside `exp`,
    is refused (PathEscapeError) and left as it is."""
    if path.is_symlink():
        raise layout.PathEscapeError(f"{path} is a symlink (to {path.resolve()}): checkpoint pruning deletes only "
                                     "the experiment's own folders; remove it yourself")
    layout.inside(exp, path, "checkpoint folder")
    return path


def _remove(exp: Path, path: Path) -> None:
    shutil.rmtree(_own_folder(exp, path), ignore_errors=True)
