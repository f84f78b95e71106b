"""Dynamic sampling drops all-equal groups, fills the step from more rounds, and loses nothing."""

from __future__ import annotations

from pathlib import Path

from buffer.dynamic_sampling import fill_step, split_by_variance
from buffer.experience import Experience
from buffer.experience_store import ExperienceStore


def _group(round_: int, task: int, rewards: list[float]) -> list[Experience]:
    return [Experience(eid=f"r{round_}/t{task}/{i}", task_id=f"t{task}", group_id=f"r{round_}/g{task}",
                       prompt_token_ids=[1, 2], response_token_ids=[3], logprobs=[-1.0], reward=r)
            for i, r in enumerate(rewards)]


# round 0: one informative group of three; round 1: one more of two; round 2: two informative (one is surplus)
ROUNDS = [
    _group(0, 0, [1.0, 1.0]) + _group(0, 1, [0.0, 1.0]) + _group(0, 2, [0.0, 0.0]),
    _group(1, 0, [0.5, 0.5]) + _group(1, 1, [1.0, 0.0]),
    _group(2, 0, [0.0, 1.0]) + _group(2, 1, [1.0, 0.2]),
]


def test_split_keeps_groups_whose_rewards_differ():
    kept, flat = split_by_variance(ROUNDS[0])
    assert {e.group_id for e in kept} == {"r0/g1"} and {e.group_id for e in flat} == {"r0/g0", "r0/g2"}


def test_fill_step_drops_all_equal_groups_and_fills_the_step():
    asked: list[int] = []
    step = fill_step(lambda r: asked.append(r) or ROUNDS[r], batch_size=3, max_extra_rounds=5)
    assert asked == [0, 1, 2] and step.rounds == 3
    assert [e.group_id for e in step.kept][::2] == ["r0/g1", "r1/g1", "r2/g0"]
    assert step.groups_dropped == 3
    # every sampled experience is kept or dropped, exactly once
    every = sorted(e.eid for r in ROUNDS for e in r)
    assert sorted(e.eid for e in step.kept + step.dropped) == every
    assert step.metrics()["explore/dynamic_sampling_dropped_share"] == len(step.dropped) / len(every)


def test_fill_step_stops_after_max_extra_rounds():
    step = fill_step(lambda r: ROUNDS[r], batch_size=3, max_extra_rounds=1)
    assert step.rounds == 2 and {e.group_id for e in step.kept} == {"r0/g1", "r1/g1"}


def test_dropped_experiences_are_recorded_and_never_trained(tmp_path: Path):
    step = fill_step(lambda r: ROUNDS[r], batch_size=3, max_extra_rounds=5)
    with ExperienceStore(tmp_path / "buffer.sqlite") as store:
        store.put(step.kept + step.dropped)
        store.mark_skipped([e.eid for e in step.dropped], train_step=1)
        taken = store.take(100)
        assert sorted(e.eid for e in taken) == sorted(e.eid for e in step.kept)
        assert set(store.skipped_eids()) == {e.eid for e in step.dropped}
