"""trainer.max_checkpoints_to_keep: which global_step_N folders a save deletes (the run itself is checked
by tests/test_rft_flow.py)."""

from __future__ import annotations

from pathlib import Path

from checkpointing import layout
from checkpointing.pruning import prune_checkpoints


def experiment(tmp_path: Path, steps: list[int]) -> Path:
    for step in steps:
        (layout.actor_dir(tmp_path, step)).mkdir(parents=True)
        (layout.actor_dir(tmp_path, step) / "optim_state.pt").write_bytes(b"x")
    layout.partial_step_dir(tmp_path, 99).mkdir()  # a checkpoint being written is not one to count or delete
    return tmp_path


def test_the_newest_are_kept(tmp_path: Path) -> None:
    exp = experiment(tmp_path, [10, 20, 30, 40])
    assert prune_checkpoints(exp, 2, current=40) == [10, 20]
    assert layout.complete_steps(exp) == [30, 40]
    assert layout.partial_step_dir(exp, 99).is_dir()
    assert not list(exp.glob("*.deleting"))


def test_unset_keeps_all_and_the_step_just_saved_is_never_deleted(tmp_path: Path) -> None:
    exp = experiment(tmp_path, [1, 2, 3])
    assert prune_checkpoints(exp, None, current=3) == []
    # a resumed run saving step 2 beside a newer step 3 of an earlier attempt keeps the one it just wrote
    assert prune_checkpoints(exp, 1, current=2) == [1]
    assert layout.complete_steps(exp) == [2, 3]


def test_a_deletion_cut_short_is_finished_by_the_next(tmp_path: Path) -> None:
    exp = experiment(tmp_path, [1, 2, 3])
    leftover = layout.deleting_step_dir(exp, 1)
    layout.step_dir(exp, 1).rename(leftover)  # renamed, then the process died before it was removed
    layout.actor_dir(exp, 1).mkdir(parents=True)  # and a later attempt wrote step 1 again
    assert prune_checkpoints(exp, 1, current=3) == [1, 2]
    assert layout.complete_steps(exp) == [3] and not list(exp.glob("*.deleting"))
