"""A stage that starts from another stage's final model, evaluated at that stage's end with the same settings,
takes that evaluation as its baseline instead of evaluating the same weights again (flows/stage.py); each
evaluation is judged on its own, so only what the earlier stage did not evaluate that way is evaluated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deployments import load_recipe
from flows.stage import eval_settings, final_evaluation_of
from schemas import ExperimentConfig

METRICS = {"arith-eval": {"strict": 0.873, "lenient": 0.88, "format": 1.0}}


@pytest.fixture
def stages(tmp_path: Path) -> tuple[ExperimentConfig, ExperimentConfig]:
    warm_up, grpo = load_recipe("arith").with_overrides({"checkpoint_root_dir": str(tmp_path)}).resolve_stages()
    warm_up.final_model_dir.mkdir(parents=True)
    return warm_up, grpo


def finish(stage: ExperimentConfig, **changes: object) -> None:
    """The summary close_stage writes at the stage's end (its final evaluation and what it depended on)."""
    summary = {"final_model": str(stage.final_model_dir), "eval": METRICS, "eval_settings": eval_settings(stage)} | changes
    stage.experiment_dir.mkdir(parents=True, exist_ok=True)
    (stage.experiment_dir / "summary.json").write_text(json.dumps(summary))


def test_the_next_stage_takes_the_warm_ups_final_evaluation(stages: tuple[ExperimentConfig, ExperimentConfig]) -> None:
    warm_up, grpo = stages
    assert Path(grpo.model.model_path) == warm_up.final_model_dir  # chained
    assert final_evaluation_of(grpo) == {}  # the warm-up has not ended
    finish(warm_up)
    assert final_evaluation_of(grpo) == METRICS


@pytest.mark.parametrize("change", [
    {"model.max_response_tokens": 100},  # longer or shorter answers score differently
    {"buffer.explorer_input.eval_tasksets.0.split": "test[:100]"},
    {"explorer.rollout_model.seed": 7},
])
def test_other_settings_evaluate_again(stages: tuple[ExperimentConfig, ExperimentConfig], change: dict) -> None:
    warm_up, grpo = stages
    finish(warm_up)
    assert final_evaluation_of(grpo.with_overrides(change)) == {}


def test_a_stopped_or_other_model_evaluates_again(stages: tuple[ExperimentConfig, ExperimentConfig], tmp_path: Path) -> None:
    warm_up, grpo = stages
    finish(warm_up, eval={})  # a budget stop: no final evaluation
    assert final_evaluation_of(grpo) == {}
    finish(warm_up, eval_settings="a digest of all evaluations at once")  # a summary written before 2026-11-28
    assert final_evaluation_of(grpo) == {}
    finish(warm_up, final_model=str(tmp_path / "elsewhere" / "final" / "huggingface"))
    assert final_evaluation_of(grpo) == {}
    finish(warm_up)
    assert final_evaluation_of(grpo.with_overrides({"model.model_path": "HuggingFaceTB/SmolLM2-135M-Instruct"})) == {}


def test_held_out_pairs_the_warm_up_did_not_score_are_evaluated(tmp_path: Path) -> None:
    """arith-dpo: the warm-up evaluates the held-out problems, the DPO stage the held-out pairs too."""
    warm_up, dpo = load_recipe("arith-dpo").with_overrides({"checkpoint_root_dir": str(tmp_path)}).resolve_stages()
    warm_up.final_model_dir.mkdir(parents=True)
    finish(warm_up)
    pairs = dpo.buffer.trainer_input.eval_pairs
    assert pairs is not None and final_evaluation_of(dpo) == METRICS  # the problems are taken, the pairs evaluated
    assert pairs.name not in final_evaluation_of(dpo)


def test_a_change_to_one_taskset_evaluates_that_one_again(stages: tuple[ExperimentConfig, ExperimentConfig]) -> None:
    warm_up, grpo = stages
    both = {"arith-eval": METRICS["arith-eval"], "arith-easy": {"strict": 0.95}}
    second = grpo.buffer.explorer_input.eval_tasksets[0].model_dump(mode="json", exclude_unset=True) | {"name": "arith-easy"}
    with_two = {"buffer.explorer_input.eval_tasksets": [
        t.model_dump(mode="json", exclude_unset=True) for t in grpo.buffer.explorer_input.eval_tasksets] + [second]}
    finish(warm_up.with_overrides(with_two), eval=both)
    assert final_evaluation_of(grpo.with_overrides(with_two)) == both
    changed = with_two | {"buffer.explorer_input.eval_tasksets": [*with_two["buffer.explorer_input.eval_tasksets"][:1],
                                                                   second | {"split": "test[:100]"}]}
    assert final_evaluation_of(grpo.with_overrides(changed)) == METRICS  # arith-easy's numbers are not taken
