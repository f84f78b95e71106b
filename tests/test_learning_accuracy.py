"""The whole run learns, in the number users read: held-out strict accuracy after a short run is above the accuracy
before by more than the difference's standard error (issue 74).

The recipe: arith's SFT warm-up (worked answers ending in \\boxed{}), cut to a few steps, through the whole stack
(Prefect, Ray, vLLM CPU greedy evaluation before and after, the torch trainer, MLflow). The untrained model almost
never boxes its answer, so its strict accuracy is near 0; a broken gradient, loss mask or final-model export leaves
it there, and the run still "completes". The full run's numbers: docs/recipes/arith.md.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from deployments import load_recipe
from schemas import ExperimentConfig

pytestmark = pytest.mark.slow
STEPS = 12
HELD_OUT = 64


def warm_up_config(root: Path) -> ExperimentConfig:
    """arith's warm-up stage alone, `STEPS` steps, evaluated greedily on `HELD_OUT` held-out problems before and after."""
    recipe = load_recipe("arith")
    warm_up = recipe.stages[0].model_dump(mode="json", exclude_unset=True)
    assert warm_up["stage_name"] == "sft_warmup"
    warm_up["buffer"]["total_steps"] = STEPS
    warm_up["trainer"]["save_interval"] = STEPS
    warm_up["buffer"]["explorer_input"]["eval_tasksets"][0]["split"] = f"test[:{HELD_OUT}]"
    return recipe.with_overrides({
        "name": "learning-accuracy",
        "checkpoint_root_dir": str(root / "checkpoints"),
        "stages": [warm_up],
    })


def standard_error_of_difference(before: float, after: float, n: int) -> float:
    """The standard error of after - before, two accuracies on n problems each (binomial)."""
    return math.sqrt((before * (1 - before) + after * (1 - after)) / n)


def test_a_short_warm_up_raises_held_out_strict_accuracy_beyond_its_standard_error(module_tmp_path: Path) -> None:
    from flows.rft import rft

    config = warm_up_config(module_tmp_path)
    (stage,) = config.resolve_stages()
    outcome = rft(config=config)[stage.name]
    before, after = outcome["eval_at_start"]["arith-eval"], outcome["eval"]["arith-eval"]
    assert outcome["steps"] == STEPS
    assert before["tasks"] == after["tasks"] == HELD_OUT  # every task counted, failed ones as wrong (issue 74)
    gain = after["strict"] - before["strict"]
    error = standard_error_of_difference(before["strict"], after["strict"], HELD_OUT)
    print(f"strict {before['strict']:.3f} -> {after['strict']:.3f} on {HELD_OUT} held-out problems "
          f"(+{gain:.3f}, standard error {error:.3f})")
    assert gain > error, (before, after, error)
