"""A short real run on a tiny task improves held-out reward: the one check that catches a silently broken
gradient, weight sync or advantage (each leaves the model where it started, and every other test passes).

The task: generated arithmetic, where the untrained model almost never answers in \\boxed{} (~1 % of its
greedy answers); with a format bonus as large as the answer's, a few GRPO steps teach it. Greedy evaluation
of held-out problems before and after, through the whole stack (Prefect, Ray, vLLM CPU, the torch trainer,
weight sync, MLflow). One run, the fewest steps and tokens that learn reliably.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments import load_recipe

pytestmark = [pytest.mark.slow, pytest.mark.full]  # ~9 min on 2 busy cores (docs/testing.md): scripts/test.sh --full

STEPS = 8


def test_a_few_grpo_steps_raise_held_out_reward(tmp_path: Path) -> None:
    from flows.rft import rft

    config = load_recipe("arith").with_overrides({
        "name": "learning-check",
        "stages": [],  # GRPO alone: the recipe's SFT warm-up would teach the form before the check could
        "checkpoint_root_dir": str(tmp_path / "checkpoints"),
        "buffer.total_steps": STEPS,
        "buffer.batch_size": 2,
        "model.max_response_tokens": 48,
        # plain GRPO at a constant lr (the recipe's DAPO would resample all-zero groups of the untrained model)
        "algorithm.algorithm_type": "grpo",
        "algorithm.optimizer.lr": 1e-4,  # 5e-5 over 6 steps: format 0 -> 0.19 (2026-11-25), short of +0.3
        "algorithm.optimizer.lr_scheduler_type": "constant",
        "algorithm.optimizer.min_lr_ratio": 0.0,
        "algorithm.kl_loss_fn": "none",
        "algorithm.kl_loss_fn_args": {"kl_coef": 0.0},
        "buffer.explorer_input.taskset.generator_args": {"train_size": 5000},  # the problems it was tuned on
        "buffer.explorer_input.taskset.reward_fn_args": {"require_boxed": True, "format_score": 1.0},
        "buffer.explorer_input.eval_tasksets.0.split": "test[:32]",
        "explorer.eval_interval": STEPS,
        "trainer.micro_batch_size": 16,
        "trainer.save_interval": 0,
    })
    outcome = rft(config=config)[config.name]
    before, after = outcome["eval_at_start"]["arith-eval"], outcome["eval"]["arith-eval"]
    assert before["format"] < 0.2, before  # the untrained model rarely boxes its answer
    assert after["format"] >= before["format"] + 0.3, (before, after)
    assert after["reward_mean"] > before["reward_mean"], (before, after)
