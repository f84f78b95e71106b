"""The one schedule (backends/schedule.py): what each stage runs, in turns or overlapped, and that the
flow and the resource plan take the same answer from it. Pure Python: nothing starts."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from backends.local.policy import OVERLAPPED_TRAINER_NICE, plan_resources
from backends.schedule import Schedule
from deployments import load_recipe
from flows.rl import takes_turns

ROOT = Path(__file__).resolve().parent.parent
SMOKE = load_recipe("smoke")


@pytest.mark.parametrize(
    ("style", "offset", "in_turns"),
    [("fixed", 0, True), ("fixed", 1, False), ("explorer_driven", 0, False), ("trainer_driven", 0, False)],
)
def test_the_flow_and_the_resource_plan_agree_on_overlap(style: str, offset: int, in_turns: bool) -> None:
    """explorer_driven with offset 0 overlaps the sides in the flow: the plan then shares the cores and
    lowers the trainer's priority too (it once gave both every core)."""
    config = SMOKE.with_overrides({"synchronizer.sync_style": style, "synchronizer.sync_offset": offset})
    assert takes_turns(config) is in_turns
    plan = plan_resources(config, {"GPU": 0.0}, cores=8)
    if in_turns:
        assert (plan.trainer_threads, plan.trainer_cpus, plan.trainer_nice) == (8, 0.0, 0)
    else:
        assert (plan.trainer_threads, plan.trainer_cpus, plan.trainer_nice) == (4, 1.0, OVERLAPPED_TRAINER_NICE)
    assert plan.engine_threads == 8


def test_each_mode_runs_its_sides() -> None:
    sides = {mode: Schedule.of(SMOKE.with_overrides({"mode": mode})).sides for mode in ("both", "explore", "train")}
    assert sides == {"both": ("explorer", "trainer"), "explore": ("explorer",), "train": ("trainer",)}
    # arith's SFT warm-up evaluates on engines of its own: on GPUs the trainer does not get their devices
    sft = load_recipe("arith").resolve_stages()[0]
    assert (sft.mode, sft.algorithm.algorithm_type) == ("train", "sft") and sft.buffer.explorer_input.eval_tasksets
    assert Schedule.of(sft).sides == ("explorer", "trainer") and not Schedule.of(sft).overlapped
    assert Schedule.of(sft.with_overrides({"buffer.explorer_input.eval_tasksets": []})).sides == ("trainer",)


def test_a_train_deployment_beside_an_explore_one_overlaps_unless_in_turns() -> None:
    """Split across two deployments, the sides still share the machine when the schedule overlaps them."""
    train = SMOKE.with_overrides({"mode": "train", "synchronizer.sync_offset": 1})
    assert Schedule.of(train).overlapped and plan_resources(train, {"GPU": 0.0}, cores=8).trainer_nice > 0
    assert not Schedule.of(SMOKE.with_overrides({"mode": "train"})).overlapped


def test_the_engines_sample_the_trainers_weights_only_in_turns_in_one_process_with_a_sync_every_step() -> None:
    assert Schedule.of(SMOKE).samples_trainer_weights
    for overrides in ({"synchronizer.sync_interval": 2, "explorer.eval_interval": 2}, {"synchronizer.sync_offset": 1},
                      {"synchronizer.sync_style": "trainer_driven"}, {"mode": "explore"}):
        assert not Schedule.of(SMOKE.with_overrides(overrides)).samples_trainer_weights, overrides
    sft = load_recipe("arith").resolve_stages()[0]  # engines beside the trainer, but no RL steps
    assert Schedule.of(sft).sides == ("explorer", "trainer") and not Schedule.of(sft).samples_trainer_weights


def test_explorer_driven_asks_every_interval_and_the_trainer_answers() -> None:
    schedule = Schedule(style="explorer_driven", interval=2, offset=0, sides=("explorer", "trainer"))
    # before step 3, two steps after the start: ask (versions up to 2 can exist); not before step 2
    assert [schedule.asks_for_weights(step, last_request=0, serving=0) for step in (1, 2, 3)] == [False, False, True]
    assert not schedule.asks_for_weights(3, last_request=0, serving=2)  # serving the newest that can exist
    assert schedule.publish_due(2, 10, requested=True) and not schedule.publish_due(2, 10, requested=False)
    assert schedule.publish_due(10, 10, requested=False)  # the final model, always


def test_a_driven_explorer_waits_before_sampling_what_max_staleness_drops() -> None:
    schedule = Schedule(style="trainer_driven", interval=1, offset=0, sides=("explorer", "trainer"), max_staleness=1)
    assert schedule.room_after(step=3, serving=1) is None  # staleness (3-1)-1 = 1: allowed
    assert schedule.room_after(step=4, serving=1) == 1  # staleness 2: wait for a version newer than 1
    fixed = Schedule(style="fixed", interval=1, offset=1, sides=("explorer", "trainer"), max_staleness=0)
    assert fixed.room_after(step=9, serving=0) is None  # fixed: the version is exact, never waited for here


def test_an_unknown_style_is_named() -> None:
    with pytest.raises(ValueError, match="synchronizer.sync_style 'sometimes'"):
        Schedule(style="sometimes", interval=1, offset=0, sides=("explorer",))


SYNC_FIELDS = {"sync_style", "sync_interval", "sync_offset"}
PACKAGES = ("algorithms", "checkpointing", "buffer", "backends", "workflows", "tracking", "preflight", "tasks", "flows",
            "cli")


def test_only_the_schedule_reads_when_the_sides_sync() -> None:
    """Nothing but the schedule (and the schemas that define and check the fields) reads them."""
    readers = sorted(
        f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}"
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.relative_to(ROOT).as_posix() != "backends/schedule.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in SYNC_FIELDS
    )
    assert readers == []


def test_each_mode_runs_the_flow_of_its_row() -> None:
    from flows.explorer import explore_stage
    from flows.rft import MODE_FLOWS, flow_for
    from flows.rl import rl
    from flows.sft_warmup import sft_warmup
    from flows.trainer import train_stage

    sft, grpo = load_recipe("arith").resolve_stages()
    assert (flow_for(sft), flow_for(grpo)) == (sft_warmup, rl)
    assert flow_for(SMOKE.with_overrides({"mode": "train"})) is train_stage
    assert flow_for(SMOKE.with_overrides({"mode": "explore"})) is explore_stage
    assert flow_for(SMOKE.with_overrides({"mode": "bench"})) is MODE_FLOWS["bench"]  # bench(stage): no model name


def test_no_backend_reads_the_synchronizer_or_the_mode_itself() -> None:
    """Backends get when and how the sides sync, and what a stage runs, from the schedule."""
    readers = sorted(
        f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}"
        for path in (ROOT / "backends").rglob("*.py")
        if path.relative_to(ROOT).as_posix() != "backends/schedule.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in ("synchronizer", "mode")
    )
    assert readers == []
