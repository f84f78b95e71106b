"""The staged run two whole-run tests share: the smoke recipe behind a 2-step SFT warm-up on rows a test
writes, evaluated before and after (as the arith recipe does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deployments import load_recipe
from schemas import ExperimentConfig


def sft_then_smoke(rows: Path, root: Path, rl_stage: str, **overrides: Any) -> ExperimentConfig:
    """smoke with stages [sft_warmup on `rows` (prompt/response JSON lines), `rl_stage`], checkpoints under root."""
    smoke = load_recipe("smoke")
    return smoke.with_overrides({
        "checkpoint_root_dir": str(root / "checkpoints"),
        "cluster.ray_address": "local",
        "trainer.max_checkpoints_to_keep": 1,  # smoke checkpoints every step: each stage keeps its last only
        # Generation on 2 CPU cores is most of the run's time: 16-token answers (and evaluations) halve it.
        # (The SFT rows are cut to 16 tokens too: their end-of-turn token goes.)
        "model.max_response_tokens": 16,
        "stages": [
            {"stage_name": "sft_warmup", "mode": "train", "algorithm": {"algorithm_type": "sft"},
             "buffer": {"batch_size": 4, "train_batch_size": 4, "total_steps": 2, "trainer_input": {
                 "experience_buffer": {"name": "sft", "path": str(rows), "split": "train", "format": {
                     "prompt_type": "plaintext", "prompt_key": "prompt", "response_key": "response"}}},
                 # evaluated before and after the warm-up, as the arith recipe does
                 "explorer_input": {"eval_tasksets": [
                     ts.model_dump(mode="json", exclude_unset=True) for ts in smoke.buffer.explorer_input.eval_tasksets]}}},
            {"stage_name": rl_stage},
        ],
        **overrides,
    })
