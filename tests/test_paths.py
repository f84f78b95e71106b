"""Paths stay inside the experiment: `project`, `name` and `stage_name` are single folder names (the schema
says which field), the experiment folder resolves inside checkpoint_root_dir (symlinks followed), and
checkpoint pruning deletes only the experiment's own folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from checkpointing import layout
from checkpointing.pruning import prune_checkpoints, remove_leftovers
from deployments import load_recipe
from schemas import ExperimentConfig, describe_errors

BAD_NAMES = ["/tmp/elsewhere", "../elsewhere", "..", ".", "a/b", "a\\b", "x\x00y", " padded "]


def smoke(**changes: object) -> dict:
    data = load_recipe("smoke").user_data()
    data.update(changes)
    return data


@pytest.mark.parametrize("field", ["project", "name"])
@pytest.mark.parametrize("value", BAD_NAMES)
def test_project_and_name_are_one_folder(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as err:
        ExperimentConfig.model_validate(smoke(**{field: value}))
    lines = describe_errors(err.value)
    assert any(line.startswith(f"{field}: ") and "folder" in line for line in lines), lines


@pytest.mark.parametrize("value", ["..", "."])
def test_stage_name_is_one_folder(value: str) -> None:
    data = smoke(stages=[{"stage_name": value}])
    with pytest.raises(ValidationError) as err:
        ExperimentConfig.model_validate(data)
    assert any(line.startswith("stages.0.stage_name: ") for line in describe_errors(err.value))


def test_stages_keep_their_chained_names() -> None:
    config = ExperimentConfig.model_validate(smoke(name="run-1", stages=[{"stage_name": "warm"}, {"stage_name": "rl"}]))
    names = [stage.name for stage in config.resolve_stages()]
    assert names == ["run-1/warm", "run-1/rl"]
    again = ExperimentConfig.model_validate(config.resolve_stages()[1].user_data())  # a stage's config round-trips
    assert again.name == "run-1/rl"


def test_a_symlinked_experiment_folder_is_refused(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "checkpoints", tmp_path / "elsewhere"
    (root / "proj").mkdir(parents=True)
    elsewhere.mkdir()
    (root / "proj" / "exp").symlink_to(elsewhere)
    config = ExperimentConfig.model_validate(smoke(project="proj", name="exp", checkpoint_root_dir=str(root)))
    with pytest.raises(layout.PathEscapeError, match="outside"):
        layout.experiment_dir(config)


def _step(exp: Path, step: int) -> None:
    layout.actor_dir(exp, step).mkdir(parents=True)
    (layout.actor_dir(exp, step) / "trainable.safetensors").write_bytes(b"x")


def test_pruning_refuses_a_symlinked_checkpoint(tmp_path: Path) -> None:
    exp, victim = tmp_path / "exp", tmp_path / "victim"
    for step in (2, 3):
        _step(exp, step)
    (victim / "actor").mkdir(parents=True)
    (victim / "actor" / "precious.txt").write_text("keep me")
    layout.step_dir(exp, 1).symlink_to(victim, target_is_directory=True)
    with pytest.raises(layout.PathEscapeError, match="global_step_1"):
        prune_checkpoints(exp, 1, current=3)
    assert (victim / "actor" / "precious.txt").read_text() == "keep me"
    assert layout.step_dir(exp, 1).is_symlink()  # left as it was, for the user to look at


def test_leftover_deleting_folders_are_removed_at_start(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    for step in (1, 2):
        _step(exp, step)
    layout.step_dir(exp, 1).rename(layout.deleting_step_dir(exp, 1))  # a deletion cut short by a crash
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("keep me")
    os.symlink(outside, layout.deleting_step_dir(exp, 7))  # not ours to delete
    with pytest.raises(layout.PathEscapeError):
        remove_leftovers(exp)
    (exp / ".global_step_7.deleting").unlink()
    assert remove_leftovers(exp) == [layout.deleting_step_dir(exp, 1)]
    assert not list(exp.glob(".*deleting")) and layout.complete_steps(exp) == [2]
    assert (outside / "data.txt").exists()
