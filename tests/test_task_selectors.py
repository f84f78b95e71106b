"""Task selectors (buffer/selectors.py): the difficulty_based selector moves to harder tasks as pass rates rise, the
same with the same seed; its state survives a restart (buffer/selector_state.py, JSON in the experiment folder) and is
rebuilt from the experience store when it is missing or stale; offline_easy2hard orders by the rows' features;
bad settings are errors naming the field before anything starts; Trinity's task_selector imports. And, slow, a real
run on the tiny model saves the state and resumes with it."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from buffer import selector_state
from buffer.experience import Experience
from buffer.experience_store import ExperienceStore
from buffer.selectors import SELECTORS, SelectorError, feature_value
from buffer.taskset import Task, TasksetReader
from schemas import ExperimentConfig, TaskSelectorConfig, import_trinity

LEVELS = 60  # tasks of difficulty 0 (easiest) to 59
BATCH = 6


def level_tasks(n: int = LEVELS) -> list[Task]:
    """Tasks whose row holds their difficulty, in a shuffled file order (so order alone says nothing)."""
    levels = list(np.random.default_rng(0).permutation(n))
    return [Task(task_id=f"levels/train/{i}", raw={"prompt": f"task {i}", "level": int(level)})
            for i, level in enumerate(levels)]


def difficulty_selector(**kwargs: object) -> TaskSelectorConfig:
    return TaskSelectorConfig.model_validate({
        "selector_type": "difficulty_based", "feature_keys": ["level"], "harder_when": "higher", "seed": 3,
        "kwargs": {"prior": "rank", "target_reward": 0.5, "tau": 0, "do_sample": True, "lamb": 0.1, "rho": 0.1,
                   **kwargs}})


def true_pass_rate(level: int, step: int) -> float:
    """The model's skill rises over the run: at step s it passes half the time at level 2 s."""
    return 1.0 / (1.0 + math.exp((level - 2.0 * step) / 3.0))


def run_curriculum(steps: int, config: TaskSelectorConfig, reader: TasksetReader | None = None,
                   start: int = 1) -> tuple[TasksetReader, list[list[int]]]:
    """Each step: read a batch, observe its pass rates (rounded to the 8 rollouts of a group), learn from them."""
    reader = reader or TasksetReader(level_tasks(), BATCH, None, selector=config)
    picked_levels = []
    for step in range(start, start + steps):
        batch = reader.read()
        picked_levels.append([t.raw["level"] for t in batch])
        index = {t.task_id: i for i, t in enumerate(reader.tasks)}
        reader.picker.update({index[t.task_id]: round(8 * true_pass_rate(t.raw["level"], step)) / 8 for t in batch})
    return reader, picked_levels


# -- the selector's math ------------------------------------------------------------------------------------------


def test_difficulty_based_moves_to_harder_tasks_as_pass_rates_rise() -> None:
    _, levels = run_curriculum(25, difficulty_selector())
    means = [float(np.mean(batch)) for batch in levels]  # step 1 knows nothing: any tasks
    early, late = np.mean(means[2:7]), np.mean(means[-5:])
    assert late > early + 15, means
    assert means[-1] == max(means[2:]), means  # harder and harder
    # it follows the edge of the model's skill (pass rate 0.5 at level 2 × step) from below, never past it
    assert all(2 * step - 20 < m < 2 * step + 2 for step, m in enumerate(means[-5:], start=21)), means
    # the same seed, the same picks
    assert run_curriculum(25, difficulty_selector())[1] == levels
    other_seed = TaskSelectorConfig.model_validate({**difficulty_selector().model_dump(), "seed": 4})
    assert run_curriculum(25, other_seed)[1] != levels


def test_a_model_that_stops_improving_stays_on_easier_tasks() -> None:
    config = difficulty_selector()
    reader = TasksetReader(level_tasks(), BATCH, None, selector=config)
    index = {t.task_id: i for i, t in enumerate(reader.tasks)}
    late = []
    for step in range(25):
        batch = reader.read()
        late = [t.raw["level"] for t in batch]
        reader.picker.update({index[t.task_id]: round(8 * true_pass_rate(t.raw["level"], 3)) / 8 for t in batch})
    assert np.mean(late) < 15  # its skill stays at level 6: the picks stay near it


def test_tau_samples_the_picks_and_a_step_never_repeats_a_task_before_its_results() -> None:
    config = difficulty_selector(tau=0.05, do_sample=False)
    reader = TasksetReader(level_tasks(), BATCH, None, selector=config)
    first, second = reader.read(), reader.read()  # two rounds of one step (dynamic sampling)
    assert not {t.task_id for t in first} & {t.task_id for t in second}
    again = TasksetReader(level_tasks(), BATCH, None, selector=config)
    assert [t.task_id for t in again.read()] == [t.task_id for t in first]
    assert len(TasksetReader(level_tasks(4), 6, None, selector=config).read()) == 6  # more than the taskset holds


def test_the_state_as_json_continues_exactly() -> None:
    config = difficulty_selector()
    reader, _ = run_curriculum(8, config)
    state = json.loads(json.dumps(reader.picker.state_dict()))  # what the experiment folder keeps
    _, straight = run_curriculum(6, config, reader=reader, start=9)
    resumed = TasksetReader(level_tasks(), BATCH, None, selector=config)
    resumed.skip(8)
    resumed.picker.load_state_dict(state)
    assert run_curriculum(6, config, reader=resumed, start=9)[1] == straight


def test_offline_easy2hard_reads_the_features_easiest_first() -> None:
    tasks = level_tasks(10)
    higher = TaskSelectorConfig(selector_type="offline_easy2hard", feature_keys=["level"], harder_when="higher")
    reader = TasksetReader(tasks, 4, 2, selector=higher)
    assert [t.raw["level"] for t in reader.read() + reader.read() + reader.read()] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    # Trinity's convention (features are pass rates): higher is easier
    lower = TaskSelectorConfig(selector_type="offline_easy2hard", feature_keys=["level"])
    assert [t.raw["level"] for t in TasksetReader(tasks, 3, 1, selector=lower).read()] == [9, 8, 7]


def test_the_selectors_today_keep_their_order() -> None:
    tasks = level_tasks(12)
    assert set(SELECTORS) == {"sequential", "shuffle", "random", "offline_easy2hard", "difficulty_based"}
    assert [t.task_id for t in TasksetReader(tasks, 5, 1).read()] == [t.task_id for t in tasks[:5]]
    skipped = TasksetReader(tasks, 5, 2, selector="shuffle", seed=9)
    skipped.skip(3)
    read = TasksetReader(tasks, 5, 2, selector="shuffle", seed=9)
    for _ in range(3):
        read.read()
    assert skipped.state_dict() == read.state_dict() and skipped.read() == read.read()


def test_a_feature_is_a_number_found_by_a_dotted_path() -> None:
    row = {"size": 4, "metadata": json.dumps({"target": 37, "numbers": [1, 2]}), "name": "x", "flag": True}
    assert feature_value(row, "size") == 4.0 and feature_value(row, "metadata.target") == 37.0
    assert feature_value({"qwen2.5_7b_pass_rate": 0.25}, "qwen2.5_7b_pass_rate") == 0.25  # Trinity's BOTS columns
    for key, why in [("blanks", "no 'blanks'"), ("metadata.numbers", "is not a number"), ("name", "is not a number"),
                     ("flag", "is not a number"), ("name.x", "is text, not JSON"), ("metadata.size", "no 'size' in 'metadata'")]:
        with pytest.raises(KeyError, match=why):
            feature_value(row, key)
    tasks = [Task(task_id="t/train/0", raw={"prompt": "p", "level": 1}), Task(task_id="t/train/1", raw={"prompt": "p"})]
    with pytest.raises(SelectorError, match=r"feature key 'level' of task t/train/1: no 'level' \(columns: prompt\)"):
        TasksetReader(tasks, 1, 1, selector=TaskSelectorConfig(selector_type="offline_easy2hard", feature_keys=["level"]))
    rates = [Task(task_id=f"t/train/{i}", raw={"a": 0.2, "b": 1.5}) for i in range(2)]
    with pytest.raises(SelectorError, match=r"'b' of task t/train/0: 1.5 is not a pass rate"):
        TasksetReader(rates, 1, 1, selector=TaskSelectorConfig(selector_type="difficulty_based", feature_keys=["a", "b"]))


# -- the state in the experiment folder --------------------------------------------------------------------------


def stored_step(store: ExperienceStore, reader: TasksetReader, step: int) -> None:
    """Explore step `step` as explore_step stores it: 4 rollouts a picked task, accuracy in the breakdown."""
    experiences = []
    for task in reader.read():
        p = true_pass_rate(task.raw["level"], step)
        for k in range(4):
            right = float(k < round(4 * p))
            experiences.append(Experience(eid=f"{step}-{task.task_id}-{k}", task_id=task.task_id,
                                          group_id=f"{step}-{task.task_id}", prompt_token_ids=[1],
                                          response_token_ids=[2], logprobs=[-0.1], reward=right + 0.1,
                                          reward_breakdown={"accuracy": right}, explore_step=step))
    store.put(experiences)


def test_the_saved_state_equals_one_rebuilt_from_the_store(tmp_path: Path) -> None:
    config = difficulty_selector()
    store = ExperienceStore.for_experiment(tmp_path)
    try:
        for step in range(1, 7):
            reader = TasksetReader(level_tasks(), BATCH, None, selector=config)
            reader.skip(step - 1)
            selector_state.restore(reader, tmp_path, store, step)
            stored_step(store, reader, step)
            selector_state.record(reader, tmp_path, store, step)
        saved = json.loads((tmp_path / selector_state.STATE_FILE).read_text())
        assert saved["through_step"] == 6 and saved["settings"]["feature_keys"] == ["level"]

        def at_step_7() -> tuple[str, list[str]]:
            reader = TasksetReader(level_tasks(), BATCH, None, selector=config)
            reader.skip(6)
            how = selector_state.restore(reader, tmp_path, store, 7)
            return how, [t.task_id for t in reader.read()]

        how, from_file = at_step_7()
        assert how == "saved after step 6"
        (tmp_path / selector_state.STATE_FILE).unlink()  # lost: rebuilt from the stored results
        how, rebuilt = at_step_7()
        assert how == "learnt from the stored results of steps 1 to 6" and rebuilt == from_file
        # a state saved at step 4 (a run stopped before saving 5 and 6) is brought forward with what the store holds
        reader = TasksetReader(level_tasks(), BATCH, None, selector=config)
        reader.skip(3)
        selector_state.restore(reader, tmp_path, store, 4)
        reader.read()
        selector_state.record(reader, tmp_path, store, 4)
        how, caught_up = at_step_7()
        assert how == "saved after step 4, then the stored results of steps 5 to 6" and caught_up == from_file
        # other learning settings: the saved state is not used
        other = difficulty_selector(lamb=0.3)
        reader = TasksetReader(level_tasks(), BATCH, None, selector=other)
        assert selector_state.restore(reader, tmp_path, store, 7).startswith("the saved state does not fit")
    finally:
        store.close()


# -- validation ---------------------------------------------------------------------------------------------------


def taskset(**selector: object) -> dict:
    return {"project": "p", "name": "n",
            "buffer": {"explorer_input": {"taskset": {"path": "data/gsm8k", "task_selector": selector}}}}


@pytest.mark.parametrize(("selector", "field", "why"), [
    ({"selector_type": "hardest_first"}, "task_selector.selector_type", "'hardest_first' is not a task selector here"),
    ({"selector_type": "difficulty_based"}, "task_selector.feature_keys", "name the row columns that hold it"),
    ({"selector_type": "offline_easy2hard", "feature_keys": ["a", "a"]}, "task_selector.feature_keys", "distinct"),
    ({"selector_type": "difficulty_based", "feature_keys": ["level"]}, "task_selector", "kwargs.prior: 'interpolate'"),
    ({"selector_type": "difficulty_based", "feature_keys": ["a", "b"], "kwargs": {"tua": 0}},
     "task_selector.kwargs.tua", "Extra inputs"),
    ({"selector_type": "difficulty_based", "feature_keys": ["a", "b"], "kwargs": {"target_reward": 2}},
     "task_selector.kwargs.target_reward", "less than or equal to 1"),
])
def test_bad_selector_settings_name_the_field(selector: dict, field: str, why: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ExperimentConfig.model_validate(taskset(**selector))
    errors = {".".join(map(str, e["loc"])): e["msg"] for e in caught.value.errors()}
    key = f"buffer.explorer_input.taskset.{field}"
    assert key in errors and why in errors[key], errors


def test_settings_a_selector_does_not_read_are_warned() -> None:
    from deployments import load_recipe

    config = load_recipe("smoke").with_overrides({"buffer.explorer_input.taskset.task_selector": {
        "selector_type": "shuffle", "feature_keys": ["level"], "kwargs": {"target_reward": 0.5}}})
    warned = "\n".join(config.warnings)
    assert "task_selector.feature_keys" in warned and "task_selector.kwargs.target_reward" in warned


def test_a_row_without_the_feature_is_named_before_the_run(tmp_path: Path) -> None:
    from backends.errors import ConfigError
    from deployments import load_recipe
    from preflight import check_tasksets

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"question": f"{i} + 1?", "answer": str(i + 1), "level": i}) + "\n"
                            for i in range(3)) + json.dumps({"question": "1 + 1?", "answer": "2"}) + "\n")
    smoke = load_recipe("smoke").with_overrides({
        "checkpoint_root_dir": str(tmp_path / "checkpoints"), "buffer.explorer_input.taskset.path": str(rows),
        "buffer.explorer_input.taskset.task_selector": {"selector_type": "offline_easy2hard", "feature_keys": ["level"],
                                                        "harder_when": "higher"}})
    with pytest.raises(ConfigError, match=r"buffer.explorer_input.taskset.task_selector.feature_keys: feature key "
                                          r"'level' of task \S+/train/3: no 'level'"):
        check_tasksets(smoke)
    rows.write_text("".join(json.dumps({"question": f"{i} + 1?", "answer": str(i + 1), "level": i}) + "\n"
                            for i in range(3)))
    assert any("3 tasks" in line for line in check_tasksets(smoke))


# -- Trinity's config ---------------------------------------------------------------------------------------------

BOTS = """
mode: explore
model: {model_path: /models/qwen, max_prompt_tokens: 1024, max_response_tokens: 1024}
buffer:
  batch_size: 32
  explorer_input:
    taskset:
      name: math-train
      path: /data/math
      format: {prompt_key: prompt, response_key: answer}
      task_selector:
        selector_type: %s
        feature_keys: [ "qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate" ]
        kwargs: {m: 16, lamb: 0.1, rho: 0.1, target_reward: 0.5, tau: 0, do_sample: true}
    default_workflow_type: math_workflow
"""


@pytest.mark.parametrize("name", ["difficulty_based", "diff_based"])
def test_trinitys_bots_selector_imports_with_its_interpolation(tmp_path: Path, name: str) -> None:
    path = tmp_path / "bots.yaml"
    path.write_text(BOTS % name)
    config, unsupported = import_trinity(path)
    assert unsupported == []
    selector = config.buffer.explorer_input.taskset.task_selector
    assert selector.selector_type == "difficulty_based"
    assert selector.feature_keys == ["qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate"]
    args = selector.kwargs
    assert (args.m, args.lamb, args.rho, args.target_reward, args.tau, args.do_sample) == (16, 0.1, 0.1, 0.5, 0, True)
    assert args.prior == "interpolate"  # Trinity's estimator: between the two reference pass rates


def test_a_selector_trinity_loads_from_a_plugin_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "plugin.yaml"
    path.write_text((BOTS % "my_plugin_selector"))
    with pytest.raises(ValidationError, match=r"'my_plugin_selector' is not a task selector here .*plugins"):
        import_trinity(path)


def test_interpolation_between_two_reference_pass_rates() -> None:
    """Trinity's prior: the model's pass rate lies between a weak and a strong reference at a fitted capacity."""
    tasks = [Task(task_id=f"m/train/{i}", raw={"weak": w, "strong": s})
             for i, (w, s) in enumerate([(0.0, 0.2), (0.1, 0.6), (0.5, 0.9), (0.9, 1.0)])]
    config = TaskSelectorConfig(selector_type="difficulty_based", feature_keys=["weak", "strong"])
    reader = TasksetReader(tasks, 2, None, selector=config)
    reader.picker.update({1: 0.35, 2: 0.7})  # exactly halfway between the references
    assert reader.picker.capacity == pytest.approx(0.5, abs=1e-4)
    assert reader.picker.prior() == pytest.approx([0.1, 0.35, 0.7, 0.95], abs=1e-3)


# -- a real run (slow) --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_saves_the_selectors_state_and_resumes_with_it(tmp_path: Path, tiny_model_path: str) -> None:
    """rg-countdown on the tiny model with difficulty_based on each problem's target: 1 step saves what it learnt;
    the same experiment asked for 2 resumes from its checkpoint and picks step 2's tasks from the saved state (here
    edited to single out two tasks, which only a run that reads it would pick)."""
    from checkpointing.layout import BUFFER_DB
    from deployments import load_recipe
    from flows.rft import rft

    selector = {"selector_type": "difficulty_based", "feature_keys": ["metadata.target"], "harder_when": "higher",
                "kwargs": {"prior": "rank", "target_reward": 0.5, "tau": 0, "do_sample": True}}
    settings = {
        "checkpoint_root_dir": str(tmp_path), "model.model_path": tiny_model_path, "buffer.total_steps": 1,
        "algorithm.repeat_times": 2, "model.max_response_tokens": 16, "explorer.eval_interval": 100,
        "explorer.eval_on_startup": False, "trainer.save_interval": 1,
        "buffer.explorer_input.taskset.generator_args.train_size": 40,
        "buffer.explorer_input.eval_tasksets.0.split": "test[:1]",
        "buffer.explorer_input.taskset.task_selector": selector,
    }
    config = load_recipe("rg-countdown").with_overrides(settings)
    assert rft(config=config)[config.name]["steps"] == 1
    state_file = config.experiment_dir / selector_state.STATE_FILE
    saved = json.loads(state_file.read_text())
    assert saved["through_step"] == 1 and saved["settings"]["feature_keys"] == ["metadata.target"]
    alpha = saved["state"]["alpha"]
    assert len(alpha) == 40 and saved["state"]["capacity"] is not None
    assert len(set(alpha)) > 1  # it learnt something from step 1's groups

    # every task sure to pass but tasks 37 and 38, sure to pass half the time: the target
    saved["state"]["alpha"] = [1000.0] * 40
    saved["state"]["beta"] = [1000.0 if i in (37, 38) else 0.01 for i in range(40)]
    state_file.write_text(json.dumps(saved))
    longer = load_recipe("rg-countdown").with_overrides({**settings, "buffer.total_steps": 2})
    assert rft(config=longer)[longer.name]["steps"] == 2
    with sqlite3.connect(longer.experiment_dir / BUFFER_DB) as db:
        step2 = sorted({tid for (tid,) in db.execute("SELECT task_id FROM experiences WHERE explore_step = 2")})
    assert step2 == ["rg-countdown/train/37", "rg-countdown/train/38"]
    assert json.loads(state_file.read_text())["through_step"] == 2
