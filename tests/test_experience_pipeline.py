"""Trinity's experience pipeline (`data_processor.experience_pipeline`, buffer/operators.py): each built-in operator
on scored experiences, the order they run in, and the rules that name a bad operator or argument."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from buffer.experience import Experience
from buffer.operators import run_pipeline
from deployments import load_recipe
from schemas import ConfigRuleError, describe_errors
from schemas.errors import error_items
from schemas.trinity.importer import import_trinity


def _exp(group: str, i: int, reward: float, **info: float) -> Experience:
    return Experience(eid=f"{group}/{i}", task_id=group, group_id=group, prompt_token_ids=[1], response_token_ids=[2, 3],
                      logprobs=[-1.0, -1.0], reward=reward, reward_breakdown={"accuracy": float(reward >= 1)}, info=dict(info))


def batch() -> list[Experience]:
    return [_exp("a", 0, 1.0, quality=0.5), _exp("a", 1, 0.0, quality=0.2), _exp("b", 0, 1.0), _exp("b", 1, 1.0),
            _exp("c", 0, float("nan"))]


def test_filters_keep_what_they_say() -> None:
    kept, metrics = run_pipeline([("invalid_reward_filter", {})], batch())
    assert [e.eid for e in kept] == ["a/0", "a/1", "b/0", "b/1"]
    assert metrics == {"pipeline/invalid_reward_filter/filtered_count": 1.0}
    kept, _ = run_pipeline([("invalid_reward_filter", {}), ("reward_filter", {"threshold": 0.5})], batch())
    assert [e.eid for e in kept] == ["a/0", "b/0", "b/1"]
    kept, metrics = run_pipeline([("reward_std_filter", {})], batch()[:4])  # b's rewards are all equal
    assert [e.eid for e in kept] == ["a/0", "a/1"] and metrics["pipeline/reward_std_filter/filtered_count"] == 2.0


def test_reward_shaping_reads_the_experiences_stats_and_pass_rates_are_reported() -> None:
    rules = [{"stats_key": "quality", "op_type": "ADD", "weight": 2.0}, {"stats_key": "accuracy", "op_type": "MUL",
                                                                          "weight": 0.5}]
    shaped, metrics = run_pipeline([("reward_shaping_mapper", {"reward_shaping_configs": rules}),
                                    ("pass_rate_calculator", {})], batch()[:4])
    # a/0: (1 + 2·0.5) · 0.5·1 = 1.0; a/1: (0 + 2·0.2) · 0.5·0 = 0; b: no quality stat, 1 · 0.5 = 0.5
    assert [e.reward for e in shaped] == pytest.approx([1.0, 0.0, 0.5, 0.5])
    assert shaped[1].reward_breakdown["shaped"] == pytest.approx(0.0) and batch()[0].reward == 1.0  # copies, not edits
    assert metrics["pipeline/pass_rate_calculator/pass_rate"] == pytest.approx((0.5 + 0.5) / 2)
    assert metrics["pipeline/reward_shaping_mapper/reward_diff/min"] == pytest.approx(-0.5)
    assert not math.isnan(metrics["pipeline/reward_shaping_mapper/reward_diff/mean"])


@pytest.mark.parametrize(("operators", "field", "says"), [
    ([{"name": "reward_fliter"}], "data_processor.experience_pipeline.operators.0.name", "unknown operator"),
    ([{"name": "data_juicer"}], "data_processor.experience_pipeline.operators.0.name", "not a dependency"),
    ([{"name": "reward_filter", "args": {"treshold": 1}}], "data_processor.experience_pipeline.operators.0.args.treshold",
     "no argument"),
    ([{"name": "reward_shaping_mapper", "args": {"reward_shaping_configs": [{"op_type": "POW"}]}}],
     "data_processor.experience_pipeline.operators.0.args.reward_shaping_configs.0", "op_type"),
])
def test_a_bad_operator_is_named(operators: list, field: str, says: str) -> None:
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides({"data_processor": {"experience_pipeline": {"operators": operators}}})
    assert any(line.startswith(f"{field}:") and says in line for line in describe_errors(exc.value)), describe_errors(exc.value)


def test_the_pipeline_input_stays_in_the_experiment_folder() -> None:
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides({"data_processor.experience_pipeline": {"input_save_path": "../x.jsonl"}})
    assert any(line.startswith("data_processor.experience_pipeline.input_save_path:") for line in describe_errors(exc.value))


def test_a_trinity_experience_pipeline_imports(tmp_path: Path) -> None:
    quickstart = Path(__file__).parent / "fixtures" / "trinity" / "quickstart.yaml"
    (tmp_path / "c.yaml").write_text(quickstart.read_text() + (
        "data_processor:\n  experience_pipeline:\n    operators:\n      - {name: reward_std_filter}\n"
        "      - {name: reward_shaping_mapper, args: {reward_shaping_configs: [{stats_key: accuracy, op_type: ADD}]}}\n"))
    config, unsupported = import_trinity(tmp_path / "c.yaml")
    assert unsupported == []
    assert [op.name for op in config.data_processor.experience_pipeline.operators] == ["reward_std_filter",
                                                                                       "reward_shaping_mapper"]


def test_mask_response_truncated_takes_a_cut_response_out_of_the_loss() -> None:
    """Trinity's mask_response_truncated (DAPO's overlong filtering): a response the engine cut at its token limit keeps
    its reward (its group's advantage counts it) but gets an all-zero mask, so none of its tokens is trained on."""
    from backends.batch import collate

    exps = [_exp("a", 0, 1.0, finish_reason="length"), _exp("a", 1, 0.0, finish_reason="stop"), _exp("b", 0, 1.0)]
    kept, metrics = run_pipeline([("mask_response_truncated", {})], exps)
    assert [e.eid for e in kept] == ["a/0", "a/1", "b/0"] and [e.reward for e in kept] == [1.0, 0.0, 1.0]
    assert [e.response_mask for e in kept] == [[0, 0], [1, 1], [1, 1]]
    assert metrics == {"pipeline/mask_response_truncated/masked_truncated_count": 1.0}
    assert exps[0].response_mask == [1, 1]  # copies, not edits
    # the trainer's batch: the cut response's tokens are outside the loss (a token-mean over 4 tokens, not 6)
    batch = collate([replace(e, advantage=1.0) for e in kept], pad_token_id=0)
    assert batch.response_mask.tolist() == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]
    assert float(batch.response_mask.sum()) == 4.0


def test_dapo_dynamic_sampling_is_filter_groups_by_accuracy() -> None:
    """Trinity's dapo_dynamic_sampling keeps a group whose responses are neither all correct nor all wrong and samples
    no more tasks: algorithm.filter_groups with metric accuracy and one round (schemas/trinity/operators.py)."""
    config = load_recipe("smoke").with_overrides({"data_processor": {"experience_pipeline": {"operators": [
        {"name": "mask_response_truncated"}, {"name": "dapo_dynamic_sampling", "args": {"correct_threshold": 0.5}}]}}})
    groups = config.algorithm.filter_groups
    assert (groups.enable, groups.metric, groups.max_num_gen_batches) == (True, "accuracy", 1)
    assert [op.name for op in config.data_processor.experience_pipeline.operators] == ["mask_response_truncated"]
    assert "dapo_dynamic_sampling" in config.derived["algorithm.filter_groups.enable"]
    more = load_recipe("smoke").with_overrides({
        "algorithm.filter_groups.max_num_gen_batches": 3,
        "data_processor": {"experience_pipeline": {"operators": [{"name": "dapo_dynamic_sampling"}]}}})
    assert more.algorithm.filter_groups.max_num_gen_batches == 3  # the user's: more rounds until the step is full


@pytest.mark.parametrize(("operators", "field", "says"), [
    ([{"name": "dapo_dynamic_sampling", "args": {"metric_key": "reward"}}], "operators.0.args.metric_key",
     "use metric_key accuracy"),
    ([{"name": "dapo_dynamic_sampling", "args": {"correct_threshold": 1.0}}], "operators.0.args.correct_threshold",
     "[0, 1)"),
    ([{"name": "reward_filter"}, {"name": "dapo_dynamic_sampling"}], "operators.1.name", "put it first"),
    ([{"name": "cod_advantage_fn"}], "operators.0.name", "Connect-the-Dots"),
])
def test_trinity_operators_not_built_here_are_refused_with_why(operators: list, field: str, says: str) -> None:
    with pytest.raises((ValidationError, ConfigRuleError)) as exc:
        load_recipe("smoke").with_overrides({"data_processor": {"experience_pipeline": {"operators": operators}}})
    problems = dict(exc.value.problems if isinstance(exc.value, ConfigRuleError) else error_items(exc.value))
    assert says in problems.get(f"data_processor.experience_pipeline.{field}", ""), problems
