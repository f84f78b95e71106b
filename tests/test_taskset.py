"""Tasksets: loading the bundled GSM8K, slicing, errors that name the file/line/key, exact resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from buffer.taskset import (
    TasksetError,
    TasksetReader,
    compute_total_steps,
    load_taskset,
    project_root,
)
from schemas import TasksetConfig

GSM8K = "data/gsm8k"


def taskset_config(**overrides: Any) -> TasksetConfig:
    """The bundled GSM8K as a training taskset, with overrides."""
    fmt = {"prompt_key": "question", "response_key": "answer", **overrides.pop("format", {})}
    values: dict[str, Any] = {
        "name": "gsm8k", "path": GSM8K, "split": "train", "default_workflow_type": "math_workflow",
    }
    return TasksetConfig(**{**values, **overrides}, format=fmt)


@pytest.fixture(scope="module")
def gsm8k_train():
    return load_taskset(taskset_config())


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# -- loading ---------------------------------------------------------------------------------------


def test_bundled_gsm8k_splits_load_with_stable_ids(gsm8k_train):
    test = load_taskset(taskset_config(split="test"))
    assert len(gsm8k_train) == 7473 and len(test) == 1319
    first = gsm8k_train[0]
    assert first.task_id == "gsm8k/train/0"
    assert test[-1].task_id == "gsm8k/test/1318"
    assert first.raw["question"].startswith("Natalia sold clips")
    assert "####" in first.raw["answer"]
    assert first.workflow_type == "math_workflow"
    assert first.format.prompt_key == "question"


def test_relative_path_resolves_against_project_root_from_any_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not (tmp_path / GSM8K).exists()
    tasks = load_taskset(taskset_config(split="test[:3]"))
    assert [t.task_id for t in tasks] == ["gsm8k/test/0", "gsm8k/test/1", "gsm8k/test/2"]
    assert project_root() is not None and (project_root() / "pyproject.toml").is_file()


def test_split_slicing_keeps_absolute_row_ids():
    full = load_taskset(taskset_config(split="test"))
    head = load_taskset(taskset_config(split="test[:64]"))
    middle = load_taskset(taskset_config(split="test[100:110]"))
    tail = load_taskset(taskset_config(split="test[-5:]"))
    assert len(head) == 64 and [t.raw for t in head] == [t.raw for t in full[:64]]
    assert [t.task_id for t in middle] == [f"gsm8k/test/{i}" for i in range(100, 110)]
    assert middle[0].raw == full[100].raw
    assert tail[-1].task_id == "gsm8k/test/1318"
    percent = load_taskset(taskset_config(split="test[:10%]"))
    assert len(percent) == 132


def test_single_jsonl_json_and_parquet_files(tmp_path):
    rows = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(5)]
    jsonl = write_jsonl(tmp_path / "mini.jsonl", rows)
    as_json = tmp_path / "mini.json"
    as_json.write_text(json.dumps(rows))
    import datasets

    parquet = tmp_path / "mini.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(parquet))
    for path in (jsonl, as_json, parquet):
        tasks = load_taskset(taskset_config(name="mini", path=str(path), split="train[1:3]"))
        assert [t.raw["question"] for t in tasks] == ["q1", "q2"], path
        assert tasks[0].task_id == "mini/train/1"


def test_a_taskset_read_again_comes_from_memory_until_its_file_changes(tmp_path):
    """Every explore step reads the training taskset; the second read is the first's tasks, and an edited
    file is read afresh."""
    path = write_jsonl(tmp_path / "mini.jsonl", [{"question": f"q{i}", "answer": "#### 1"} for i in range(3)])
    config = taskset_config(name="mini", path=str(path))
    first, again = load_taskset(config), load_taskset(config)
    assert again == first and again is not first and all(a is b for a, b in zip(again, first, strict=True))
    again.clear()  # the caller's own list
    assert len(load_taskset(config)) == 3
    write_jsonl(path, [{"question": "changed", "answer": "#### 2"}])
    assert [t.raw["question"] for t in load_taskset(config)] == ["changed"]
    assert [t.raw["question"] for t in load_taskset(config.model_copy(update={"split": "train[:0]+train"}))] == ["changed"]


def test_missing_path_is_reported_with_where_it_looked(tmp_path):
    with pytest.raises(TasksetError, match=r"path 'data/nope/train.jsonl' not found"):
        load_taskset(taskset_config(path="data/nope/train.jsonl"))


def test_folder_without_the_split_names_the_expected_files():
    with pytest.raises(TasksetError, match=r"no file for split 'validation' in .*gsm8k.*test.jsonl, train.jsonl"):
        load_taskset(taskset_config(split="validation"))


def test_malformed_json_line_is_named(tmp_path):
    rows = [json.dumps({"question": "a", "answer": "#### 1"})] * 4
    rows.insert(2, '{"question": "broken", "answer": ')
    bad = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(TasksetError, match=rf"{bad}: malformed JSON on line 3"):
        load_taskset(taskset_config(path=str(bad)))


def test_missing_prompt_key_in_one_row_names_row_and_file(tmp_path):
    rows = [{"question": f"q{i}", "answer": "#### 1"} for i in range(20)]
    rows[17] = {"problem": "q17", "answer": "#### 1"}
    bad = write_jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(TasksetError, match=rf"key 'question' missing in row 17 of {bad} \(line 18\)"):
        load_taskset(taskset_config(path=str(bad)))


def test_prompt_key_absent_from_every_row_lists_columns():
    with pytest.raises(TasksetError, match=r"key 'problem' not in .*train.jsonl \(columns: question, answer\)"):
        load_taskset(taskset_config(format={"prompt_key": "problem"}))


def test_workflow_required_keys_are_checked(tmp_path):
    from workflows import get_workflow

    rows = write_jsonl(tmp_path / "noanswer.jsonl", [{"question": "q"}])
    config = taskset_config(path=str(rows))
    assert len(load_taskset(config)) == 1  # the prompt alone is enough by default
    keys = get_workflow("math_workflow").required_keys(config.format)
    with pytest.raises(TasksetError, match=r"key 'answer' not in"):
        load_taskset(config, required_keys=keys)


def test_a_row_can_name_its_own_workflow(tmp_path):
    rows = write_jsonl(
        tmp_path / "mixed.jsonl",
        [{"question": "a", "wf": "other_workflow"}, {"question": "b", "wf": None}],
    )
    tasks = load_taskset(taskset_config(path=str(rows), format={"workflow_key": "wf"}))
    assert [t.workflow_type for t in tasks] == ["other_workflow", "math_workflow"]


def test_unset_path_is_an_error():
    with pytest.raises(TasksetError, match="taskset 'gsm8k': path is not set"):
        load_taskset(taskset_config(path=None))


def test_invalid_split_spec():
    with pytest.raises(TasksetError, match=r"invalid split 'train\[:x\]'"):
        load_taskset(taskset_config(split="train[:x]"))


# -- reading batch by batch ------------------------------------------------------------------------


def ids(batch):
    return [t.task_id for t in batch]


def test_epochs_visit_every_task_once_with_full_batches_across_boundaries(gsm8k_train):
    tasks = gsm8k_train[:10]
    reader = TasksetReader(tasks, batch_size=4, total_epochs=3, selector="shuffle", seed=7)
    batches = list(reader)
    assert [len(b) for b in batches] == [4] * 7 + [2]
    assert len(batches) == compute_total_steps(10, 4, 3)
    flat = [t for b in batches for t in ids(b)]
    for epoch in range(3):
        assert sorted(flat[epoch * 10 : (epoch + 1) * 10]) == sorted(ids(tasks))
    assert flat[:10] != flat[10:20]  # reshuffled each epoch
    assert reader.finished and reader.consumed == 30
    with pytest.raises(StopIteration):
        reader.read()


def test_selectors_sequential_shuffle_random(gsm8k_train):
    def first(selector: str, seed: int = 1) -> list[str]:
        return ids(TasksetReader(gsm8k_train, batch_size=16, selector=selector, seed=seed).read())

    assert first("sequential")[:3] == ["gsm8k/train/0", "gsm8k/train/1", "gsm8k/train/2"]
    assert first("shuffle") == first("shuffle") != first("shuffle", seed=2)
    assert first("random") == first("random") != first("shuffle")
    assert len(set(first("random"))) == 16  # no repeats inside a batch
    with pytest.raises(ValueError, match="unknown task selector 'best'"):
        TasksetReader(gsm8k_train, batch_size=1, selector="best")


def test_reader_follows_the_tasksets_task_selector(gsm8k_train):
    config = taskset_config(task_selector={"selector_type": "shuffle", "seed": 5})
    reader = TasksetReader.for_taskset(gsm8k_train, config, batch_size=8, total_epochs=2)
    assert (reader.selector, reader.seed, reader.total_epochs) == ("shuffle", 5, 2)
    assert ids(reader.read()) == ids(
        TasksetReader(gsm8k_train, batch_size=8, selector="shuffle", seed=5).read()
    )


@pytest.mark.parametrize("selector", ["sequential", "shuffle", "random"])
def test_saved_position_restores_identical_later_batches(gsm8k_train, selector):
    tasks = gsm8k_train[:50]

    def reader() -> TasksetReader:
        return TasksetReader(tasks, batch_size=8, total_epochs=2, selector=selector, seed=3)

    expected = [ids(b) for b in reader()]
    assert len(expected) == compute_total_steps(50, 8, 2) == 13

    first = reader()
    head = [ids(first.read()) for _ in range(7)]  # 56 tasks: into the second epoch
    saved = json.loads(json.dumps(first.state_dict()))  # as a checkpoint stores it
    assert saved["epoch"] == 1 and saved["offset"] == 6

    resumed = reader()
    resumed.load_state_dict(saved)
    assert head + [ids(b) for b in resumed] == expected
    assert resumed.finished and resumed.consumed == 100


def test_position_from_another_taskset_or_seed_is_refused(gsm8k_train):
    state = TasksetReader(gsm8k_train[:20], batch_size=4, selector="shuffle", seed=3).state_dict()
    with pytest.raises(ValueError, match="num_tasks=20 .* num_tasks=21"):
        TasksetReader(gsm8k_train[:21], batch_size=4, selector="shuffle", seed=3).load_state_dict(state)
    with pytest.raises(ValueError, match="seed=3 .* seed=4"):
        TasksetReader(gsm8k_train[:20], batch_size=4, selector="shuffle", seed=4).load_state_dict(state)
    with pytest.raises(ValueError, match="selector='shuffle' .* selector='random'"):
        TasksetReader(gsm8k_train[:20], batch_size=4, selector="random", seed=3).load_state_dict(state)


def test_unbounded_reader_and_total_steps_helper(gsm8k_train):
    reader = TasksetReader(gsm8k_train[:5], batch_size=4, total_epochs=None)
    for _ in range(10):
        assert len(reader.read()) == 4
    assert not reader.finished and reader.epoch == 8
    assert compute_total_steps(7473, 96, 1) == 78
    assert compute_total_steps(7473, 96, 2) == 156
    assert compute_total_steps(7473, 96, 1, total_steps=5) == 5
    with pytest.raises(ValueError):
        compute_total_steps(10, 0, 1)
