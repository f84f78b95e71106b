"""Dynamic sampling drops all-equal groups, fills the step from more rounds, and loses nothing; the setting,
the store's record of what was dropped and of where the next step's tasks start. (Whole runs through the
flow: tests/test_dynamic_sampling_run.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from buffer.dynamic_sampling import fill_step, split_by_variance
from buffer.experience import Experience
from buffer.experience_store import ExperienceStore
from deployments import load_recipe
from tasks.explore import taskset_reader


def _group(round_: int, task: int, rewards: list[float], step: int = 1) -> list[Experience]:
    return [Experience(eid=f"s{step}/r{round_}/t{task}/{i}", task_id=f"t{task}", group_id=f"s{step}/r{round_}/g{task}",
                       prompt_token_ids=[1, 2], response_token_ids=[3], logprobs=[-1.0], reward=r,
                       reward_breakdown={"accuracy": 1.0}, explore_step=step, model_version=step - 1)
            for i, r in enumerate(rewards)]


# round 0: one informative group of three; round 1: one more of two; round 2: two informative (one is surplus)
ROUNDS = [
    _group(0, 0, [1.0, 1.0]) + _group(0, 1, [0.0, 1.0]) + _group(0, 2, [0.0, 0.0]),
    _group(1, 0, [0.5, 0.5]) + _group(1, 1, [1.0, 0.0]),
    _group(2, 0, [0.0, 1.0]) + _group(2, 1, [1.0, 0.2]),
]


def test_split_keeps_groups_whose_rewards_differ():
    kept, flat = split_by_variance(ROUNDS[0])
    assert {e.group_id for e in kept} == {"s1/r0/g1"} and {e.group_id for e in flat} == {"s1/r0/g0", "s1/r0/g2"}
    # by accuracy, every group of these is all-equal
    assert split_by_variance(ROUNDS[0], "accuracy")[0] == []


def test_a_metric_the_workflow_does_not_give_is_named():
    bare = [Experience(eid="e", task_id="t", group_id="g", prompt_token_ids=[1], response_token_ids=[2],
                       logprobs=[-1.0], reward=1.0)]
    with pytest.raises(ValueError, match=r"algorithm.filter_groups.metric 'accuracy': task t's workflow gives no"):
        split_by_variance(bare, "accuracy")


def test_fill_step_drops_all_equal_groups_and_fills_the_step():
    asked: list[int] = []
    step = fill_step(lambda r: asked.append(r) or ROUNDS[r], batch_size=3, max_rounds=6)
    assert asked == [0, 1, 2] and step.rounds == 3
    assert [e.group_id for e in step.kept][::2] == ["s1/r0/g1", "s1/r1/g1", "s1/r2/g0"]
    assert step.groups_dropped == 3
    # every sampled experience is kept or dropped, exactly once
    every = sorted(e.eid for r in ROUNDS for e in r)
    assert sorted(e.eid for e in step.kept + step.dropped) == every
    metrics = step.metrics()
    assert metrics["explore/dynamic_sampling_dropped_share"] == len(step.dropped) / len(every)
    assert metrics["explore/dynamic_sampling_groups_kept"] == 3 and metrics["explore/dynamic_sampling_rounds"] == 3


def test_fill_step_stops_after_max_rounds():
    step = fill_step(lambda r: ROUNDS[r], batch_size=3, max_rounds=2)
    assert step.rounds == 2 and {e.group_id for e in step.kept} == {"s1/r0/g1", "s1/r1/g1"}


def test_a_step_where_no_group_differs_keeps_its_first_round():
    flat = [_group(0, 0, [1.0, 1.0]), _group(1, 0, [0.0, 0.0])]
    step = fill_step(lambda r: flat[r], batch_size=2, max_rounds=2)
    assert step.rounds == 2 and [e.eid for e in step.kept] == [e.eid for e in flat[0]]
    assert [e.eid for e in step.dropped] == [e.eid for e in flat[1]] and step.groups_dropped == 1


def test_dropped_experiences_are_recorded_in_the_same_put_and_never_trained(tmp_path: Path):
    step = fill_step(lambda r: ROUNDS[r], batch_size=3, max_rounds=6)
    with ExperienceStore(tmp_path / "buffer.sqlite") as store:
        store.put(step.kept, dropped=step.dropped, batches=(1, step.rounds))
        assert store.count_untrained() == len(step.kept)
        taken = store.take(100)
        assert sorted(e.eid for e in taken) == sorted(e.eid for e in step.kept)
        assert store.dropped_eids() == {e.eid: 1 for e in step.dropped}
        store.mark_trained([e.eid for e in taken], train_step=1)
        # a resume from before train step 1 un-trains the kept ones, never the dropped ones
        store.restore_read_position({"train_step": 0, "trained": 0, "skipped": 0})
        assert sorted(e.eid for e in store.take(100)) == sorted(e.eid for e in step.kept)
        assert store.skip_stale(min_version=5, train_step=1) == len(step.kept)  # the dropped are not touched
        assert set(store.skipped_eids()).isdisjoint(store.dropped_eids())
        with pytest.raises(ValueError, match="already stored"):  # a step is written once
            store.put(step.kept[:1])


def test_the_next_step_reads_on_after_the_batches_each_step_read(tmp_path: Path):
    with ExperienceStore(tmp_path / "buffer.sqlite") as store:
        assert [store.taskset_batches_before(k) for k in (1, 2, 3)] == [0, 1, 2]  # one batch a step
        store.put(_group(0, 0, [1.0, 0.0], step=1), dropped=_group(1, 0, [0.0, 0.0], step=1), batches=(1, 3))
        store.put(_group(0, 1, [1.0, 0.0], step=2), batches=(2, 1))
        assert [store.taskset_batches_before(k) for k in (1, 2, 3, 4)] == [0, 3, 4, 5]
        store.delete_explored_after(1)  # explored again from step 2: from the same place
        assert store.taskset_batches_before(2) == 3 and store.taskset_batches_before(3) == 4


def test_a_round_reads_gen_batch_size_tasks_from_where_the_earlier_rounds_stopped():
    dapo = load_recipe("smoke").with_overrides({"algorithm.algorithm_type": "dapo_full", "buffer.batch_size": 2,
                                                "algorithm.filter_groups.gen_batch_size": 3})
    every = [t.task_id for t in taskset_reader(dapo, 1, 0).read() + taskset_reader(dapo, 1, 1).read()]
    assert len(every) == 6 and len(set(every)) == 6  # two rounds of 3: the second starts after the first
    # a step after 1 round reads the second: where a resumed run's step starts (the store counts rounds)
    assert [t.task_id for t in taskset_reader(dapo, 2, 1).read()] == every[3:]
    # without dynamic sampling a batch is buffer.batch_size, and the setting is warned about
    grpo = load_recipe("smoke").with_overrides({"buffer.batch_size": 2, "algorithm.filter_groups.gen_batch_size": 3})
    assert len(taskset_reader(grpo, 1, 0).read()) == 2
    assert any("gen_batch_size" in w and "no effect without dynamic sampling" in w for w in grpo.warnings)


def test_the_dapo_full_preset_turns_it_on_and_the_setting_reads_verls_names():
    dapo = load_recipe("smoke").with_overrides({"algorithm.algorithm_type": "dapo_full"})
    assert dapo.algorithm.filter_groups.enable is True
    assert dapo.derived["algorithm.filter_groups.enable"] == "preset of algorithm_type 'dapo_full'"
    assert load_recipe("smoke").algorithm.filter_groups.enable is False  # grpo: off
    # Trinity's dapo preset leaves it off (its config turns it on: the dapo_dynamic_sampling operator)
    assert load_recipe("smoke").with_overrides({"algorithm.algorithm_type": "dapo"}).algorithm.filter_groups.enable is False
    off = load_recipe("smoke").with_overrides({"algorithm.algorithm_type": "dapo_full",
                                               "algorithm.filter_groups.enable": False})
    assert off.algorithm.filter_groups.enable is False  # the user's value wins over the preset's
    verl = load_recipe("smoke").with_overrides({"algorithm.filter_groups": {"enable": True, "metric": "acc",
                                                                            "max_num_gen_batches": 3}})
    assert (verl.algorithm.filter_groups.metric, verl.algorithm.filter_groups.max_num_gen_batches) == ("accuracy", 3)


def test_bad_settings_are_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"max_num_gen_batches 0: give a bound ≥ 1"):
        load_recipe("smoke").with_overrides({"algorithm.filter_groups.max_num_gen_batches": 0})
    with pytest.raises(ValueError, match=r"algorithm.filter_groups.enable: dynamic sampling keeps groups"):
        load_recipe("smoke").with_overrides({"algorithm.algorithm_type": "raft", "algorithm.repeat_times": 1,
                                             "algorithm.filter_groups.enable": True})
