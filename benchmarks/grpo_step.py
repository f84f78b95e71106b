"""Seconds per GRPO step at 8 samples × ≤128 response tokens on SmolLM2-135M-Instruct (CPU).

Runs the real `rft` flow (Prefect, Ray, vLLM CPU, torch trainer) for a few steps and reads each
step's explore / train / sync seconds back from MLflow. The first step is reported apart: it pays
one-time costs. Prints a table and writes benchmarks/results/grpo_step.json.

    .venv/bin/python benchmarks/grpo_step.py [--steps 6] [--set path=value ...] [--out FILE]

Variants measured for the README: `--set trainer.skip_zero_advantage=false` (every sample
trained: the dense worst case) and `--set explorer.rollout_model.enforce_eager=false` (compiled engine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

TRL_SECONDS_PER_STEP = 35.0  # TRL GRPOTrainer, same model, shape and machine (developers' guide)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps to run (the first is warm-up)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="extra dotted.path=value")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "grpo_step.json"))
    args = parser.parse_args()

    os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="rft-bench-prefect-"))
    from mlflow.tracking import MlflowClient

    from deployments import load_recipe
    from flows.rft import rft
    from schemas import parse_set_args
    from tasks.tracking import tracking_uri

    root = Path(tempfile.mkdtemp(prefix="rft-bench-"))
    config = load_recipe("gsm8k").with_overrides(
        {
            "name": "bench-grpo-step",
            "checkpoint_root_dir": str(root),
            "cluster.ray_address": "local",
            "buffer.batch_size": 1,
            "algorithm.repeat_times": 8,
            "model.max_response_tokens": 128,
            "buffer.total_steps": args.steps,
            "buffer.explorer_input.eval_tasksets": [],
            "trainer.save_interval": 0,
            **parse_set_args(args.overrides),
        }
    )
    started = time.perf_counter()
    outcome = rft(config=config)[config.name]
    total_wall = time.perf_counter() - started

    client = MlflowClient(tracking_uri=tracking_uri(config))
    run_id = outcome["mlflow_run_id"]

    def series(key: str) -> list[float]:
        return [m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]

    explore, train, sync = series("time/explore_s"), series("time/train_s"), series("time/sync_s")
    wall, samples = series("time/step_wall_s"), series("explore/experiences")
    measured = slice(1, None) if len(wall) > 1 else slice(0, None)
    step_s = statistics.mean(wall[measured])
    result = {
        "model": config.model.model_path,
        "samples_per_step": config.buffer.batch_size * config.algorithm.repeat_times,
        "max_response_tokens": config.model.max_response_tokens,
        "steps_measured": len(wall[measured]),
        "seconds_per_step": step_s,
        "explore_s": statistics.mean(explore[measured]),
        "train_s": statistics.mean(train[measured]),
        "sync_s": statistics.mean(sync[measured]),
        "samples_per_s": statistics.mean(samples[measured]) / step_s,
        # Samples with advantage 0 add nothing to the gradient and are left out of the pass (exact; see
        # trainer.skip_zero_advantage): how many were trained tells how dense this run was.
        "trained_samples_per_step": statistics.mean(samples[measured])
        - statistics.mean(series("train/skipped_zero_advantage")[measured]),
        "response_length_mean": statistics.mean(series("explore/response_length")[measured]),
        "rollout_tokens_per_s": statistics.mean(series("explore/rollout_tokens_per_s")[measured]),
        "train_tokens_per_s": statistics.mean(series("train/train_tokens_per_s")[measured]),
        "first_step_s": wall[0],
        "engine_eager": config.explorer.rollout_model.enforce_eager,
        "skip_zero_advantage": getattr(config.trainer, "skip_zero_advantage", None),
        "run_wall_s_including_startup": total_wall,
        "speedup_vs_trl": TRL_SECONDS_PER_STEP / step_s,
        "cpu_count": os.cpu_count(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value:.3f}" if isinstance(value, float) else f"{key:<{width}}  {value}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
