"""The SQLite experience store: durability, take/mark semantics, crash safety, multi-process use."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from buffer.experience import Experience
from buffer.experience_store import ORDERS, ExperienceStore
from schemas.algorithm import AlgorithmConfig
from schemas.algorithm_registry import SAMPLE_STRATEGIES
from tasks.train import max_staleness, take_order


def make(eid: str, reward: float = 1.0, explore_step: int = 0, group: str = "g") -> Experience:
    return Experience(
        eid=eid,
        task_id=f"gsm8k/train/{eid}",
        group_id=group,
        prompt_token_ids=[1, 2, 3],
        response_token_ids=[4, 5],
        logprobs=[-0.5, -0.25],
        reward=reward,
        reward_breakdown={"accuracy": reward, "format": 0.0},
        explore_step=explore_step,
        model_version=explore_step,
        response_text="\\boxed{4}",
    )


@pytest.fixture
def store(tmp_path):
    with ExperienceStore.for_experiment(tmp_path / "exp") as s:
        yield s


def test_lives_under_the_experiment_dir_in_wal_mode(tmp_path):
    with ExperienceStore.for_experiment(tmp_path / "exp") as s:
        assert s.path == tmp_path / "exp" / "buffer" / "experiences.db"
    conn = sqlite3.connect(tmp_path / "exp" / "buffer" / "experiences.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_experiences_survive_reopen_field_for_field(tmp_path):
    original = [make(f"e{i}", reward=i / 4, explore_step=i) for i in range(4)]
    with ExperienceStore.for_experiment(tmp_path) as s:
        assert s.put(original) == 4
    with ExperienceStore.for_experiment(tmp_path) as s:
        assert s.all_eids() == ["e0", "e1", "e2", "e3"]
        assert s.take(10) == original  # dataclass equality: every field round-trips


def test_take_returns_oldest_untrained_and_changes_nothing_until_marked(store):
    store.put([make(f"a{i}") for i in range(3)])
    store.put([make(f"b{i}") for i in range(3)])
    first = store.take(4)
    assert [e.eid for e in first] == ["a0", "a1", "a2", "b0"]
    assert [e.eid for e in store.take(4)] == ["a0", "a1", "a2", "b0"]  # take alone consumes nothing
    assert store.count_untrained() == 6

    store.mark_trained([e.eid for e in first], train_step=0)
    assert store.count_untrained() == 2
    assert [e.eid for e in store.take(4)] == ["b1", "b2"]  # fewer than asked: what there is
    assert store.read_position() == {"train_step": 0, "trained": 4, "skipped": 0}
    assert store.trained_eids() == {"a0": 0, "a1": 0, "a2": 0, "b0": 0}


def test_marking_twice_or_unknown_eids_is_refused_atomically(store):
    store.put([make("x"), make("y"), make("z")])
    store.mark_trained(["x"], train_step=0)
    with pytest.raises(ValueError, match="'x' was already trained at train step 0"):
        store.mark_trained(["y", "x"], train_step=1)
    assert store.trained_eids() == {"x": 0}  # y was not marked by the failed call
    with pytest.raises(KeyError, match="unknown experience eids"):
        store.mark_trained(["y", "nope"], train_step=1)
    assert store.count_untrained() == 2


def test_duplicate_eid_on_put_is_refused_and_nothing_of_that_put_is_stored(store):
    store.put([make("x")])
    with pytest.raises(ValueError, match="eid 'x' is already stored"):
        store.put([make("new"), make("x")])
    assert store.all_eids() == ["x"]


def test_crash_between_take_and_mark_loses_nothing_and_trains_nothing_twice(tmp_path):
    """A trainer takes a batch and dies before its optimizer step: the batch is still there."""
    path = tmp_path / "experiences.db"
    with ExperienceStore(path) as s:
        s.put([make(f"e{i}") for i in range(6)])
        batch = s.take(3)
        s.mark_trained([e.eid for e in batch], train_step=0)

    crashed = ExperienceStore(path)
    taken_before_crash = [e.eid for e in crashed.take(3)]
    del crashed  # "crash": the process goes away without committing

    with ExperienceStore(path) as s:
        retried = s.take(3)
        assert [e.eid for e in retried] == taken_before_crash == ["e3", "e4", "e5"]
        s.mark_trained([e.eid for e in retried], train_step=1)
        trained = s.trained_eids()
    assert sorted(trained) == [f"e{i}" for i in range(6)]  # every one trained, each exactly once
    assert trained == {"e0": 0, "e1": 0, "e2": 0, "e3": 1, "e4": 1, "e5": 1}


def test_restore_read_position_retrains_what_lost_steps_consumed(store):
    store.put([make(f"e{i}") for i in range(6)])
    store.mark_trained(["e0", "e1"], train_step=0)
    checkpoint = store.read_position()  # checkpoint saved after train step 0
    store.mark_trained(["e2", "e3"], train_step=1)  # trained, but the weights were never saved

    assert store.restore_read_position(checkpoint) == 2
    assert [e.eid for e in store.take(2)] == ["e2", "e3"]
    assert store.trained_eids() == {"e0": 0, "e1": 0}
    with pytest.raises(ValueError, match="checkpoint expects 5 experiences trained"):
        store.restore_read_position({"train_step": 0, "trained": 5})


def test_delete_explored_after_drops_only_later_untrained_steps(store):
    store.put([make(f"s0-{i}", explore_step=0) for i in range(2)])
    store.put([make(f"s1-{i}", explore_step=1) for i in range(2)])
    assert store.max_explore_step() == 1
    assert store.delete_explored_after(0) == 2
    assert store.all_eids() == ["s0-0", "s0-1"]
    store.mark_trained(["s0-0"], train_step=0)
    with pytest.raises(ValueError, match="already trained"):
        store.delete_explored_after(-1)


def test_reward_stats(store):
    store.put([make("a", 1.0, explore_step=0), make("b", 0.0, explore_step=0)])
    store.put([make("c", 1.1, explore_step=1)])
    assert store.reward_stats(explore_step=0) == {
        "count": 2, "mean": 0.5, "std": 0.5, "min": 0.0, "max": 1.0,
    }
    assert store.reward_stats()["count"] == 3
    assert store.reward_stats(explore_step=7)["count"] == 0
    store.mark_trained(["c"], train_step=3)
    assert store.reward_stats(train_step=3)["mean"] == pytest.approx(1.1)


def _produce(path: str, prefix: str, batches: int, per_batch: int) -> None:
    with ExperienceStore(path) as s:
        for b in range(batches):
            s.put([make(f"{prefix}-{b}-{i}", explore_step=b) for i in range(per_batch)])


def test_writers_in_other_processes_while_this_one_consumes(tmp_path):
    path = tmp_path / "experiences.db"
    ctx = mp.get_context("spawn")
    with ExperienceStore(path) as consumer:  # the file exists before the writers start
        writers = [
            ctx.Process(target=_produce, args=(str(path), name, 20, 5)) for name in ("p", "q")
        ]
        for w in writers:
            w.start()
        trained: list[str] = []
        step = 0
        while len(trained) < 200:
            batch = consumer.take(min(16, 200 - len(trained)), timeout_s=30)
            assert batch, "writers stopped producing"
            consumer.mark_trained([e.eid for e in batch], train_step=step)
            trained += [e.eid for e in batch]
            step += 1
        for w in writers:
            w.join(timeout=60)
            assert w.exitcode == 0
        assert consumer.count_untrained() == 0
        assert len(trained) == len(set(trained)) == 200
        assert sorted(consumer.all_eids()) == sorted(trained)
        # Each writer's experiences come out in the order it wrote them.
        p_order = [e for e in trained if e.startswith("p-")]
        assert p_order == [f"p-{b}-{i}" for b in range(20) for i in range(5)]


def test_threads_share_one_store(store):
    import threading

    def put_many(prefix: str) -> None:
        for i in range(25):
            store.put([make(f"{prefix}{i}")])

    threads = [threading.Thread(target=put_many, args=(p,)) for p in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.count() == 100 and len(set(store.all_eids())) == 100


def test_take_needs_a_positive_count(store):
    with pytest.raises(ValueError):
        store.take(0)
    assert isinstance(store.path, Path)


def test_stale_experiences_are_skipped_accounted_and_restored(store):
    store.put([make(f"e{i}") for i in range(4)])
    store.mark_trained(["e0"], train_step=1)
    checkpoint = store.read_position()
    store.mark_skipped(["e1", "e2"], train_step=2)  # too stale for step 2: never trained, never taken
    assert [e.eid for e in store.take(4)] == ["e3"] and store.count_untrained() == 1
    assert store.skipped_eids() == {"e1": 2, "e2": 2}
    with pytest.raises(ValueError, match="unknown, trained, skipped or dropped already"):
        store.mark_skipped(["e1"], train_step=3)
    assert store.read_position() == {"train_step": 1, "trained": 1, "skipped": 2}
    assert store.restore_read_position(checkpoint) == 2  # the lost step 2 decides again
    assert store.skipped_eids() == {} and store.count_untrained() == 3


def test_take_orders_of_the_sample_strategies(store):
    from dataclasses import replace

    store.put([replace(make(f"e{i}", explore_step=step), advantage=adv)
               for i, (step, adv) in enumerate([(1, 0.1), (3, -2.0), (2, 0.5), (3, 1.0), (1, None)])])
    assert [e.eid for e in store.take(5)] == ["e0", "e1", "e2", "e3", "e4"]  # oldest: insertion order
    assert [e.eid for e in store.take(5, order="newest")] == ["e1", "e3", "e2", "e0", "e4"]  # version, then insertion
    assert [e.eid for e in store.take(3, order="largest_advantage")] == ["e1", "e3", "e2"]  # |advantage|
    store.mark_trained(["e1", "e3"], train_step=1)  # trained ones are never taken again, whatever the order
    assert [e.eid for e in store.take(2, order="newest")] == ["e2", "e0"]
    with pytest.raises(ValueError, match="one of"):
        store.take(1, order="random; DROP TABLE experiences")


@pytest.mark.parametrize("strategy", list(SAMPLE_STRATEGIES))
def test_every_sample_strategy_the_schema_accepts_has_a_buffer_order(strategy: str) -> None:
    """A strategy name accepted and not acted on would train in the default order silently: each one has its order,
    and the staleness bound every strategy takes is read under it."""
    args: dict[str, object] = {"priority_fn": "largest_advantage"} if strategy == "priority" else {}
    if "max_staleness" in SAMPLE_STRATEGIES[strategy].model_fields:
        args["max_staleness"] = 2
    config = SimpleNamespace(algorithm=AlgorithmConfig(sample_strategy=strategy, sample_strategy_args=args))
    assert take_order(config) == ("largest_advantage" if strategy == "priority" else "oldest")
    assert take_order(config) in ORDERS
    assert max_staleness(config) == (2 if "max_staleness" in args else None)
