"""Seconds per GRPO step at 8 samples × ≤128 response tokens on SmolLM2-135M-Instruct (CPU), ours and TRL's.

Runs the real `rft` flow (Prefect, Ray, vLLM CPU, torch trainer) for a few steps per variant —
explorer and trainer taking turns (sync_offset 0) or overlapped (sync_offset 1), syncing every step or
every second step — and reads each step's times back from MLflow; then TRL's GRPOTrainer at the same
shape in a subprocess of the same run (benchmarks/trl_grpo.py, TRL from $RFT_TRL_SITE, which
scripts/bench.sh fills; skipped with a note when TRL is not there). The first step of each is
reported apart: it pays one-time costs. Prints a table and writes benchmarks/results/grpo_step.json.

    .venv/bin/python benchmarks/grpo_step.py [--steps 6] [--variants offset1-interval1 ...] [--no-trl]
                                             [--set path=value ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS: dict[str, dict[str, int]] = {
    "offset0-interval1": {"synchronizer.sync_offset": 0, "synchronizer.sync_interval": 1},
    "offset1-interval1": {"synchronizer.sync_offset": 1, "synchronizer.sync_interval": 1},
    "offset0-interval2": {"synchronizer.sync_offset": 0, "synchronizer.sync_interval": 2},
    "offset1-interval2": {"synchronizer.sync_offset": 1, "synchronizer.sync_interval": 2},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps per variant (the first is warm-up)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--no-trl", action="store_true", help="do not run TRL's GRPOTrainer")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="extra dotted.path=value")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "grpo_step.json"))
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="rft-bench-prefect-"))

    results = {name: run_variant(name, VARIANTS[name], args.steps, args.overrides) for name in args.variants}
    trl = None if args.no_trl else run_trl(args.steps)
    report = {
        "shape": "1 GSM8K prompt x 8 samples, <=128 response tokens, SmolLM2-135M-Instruct float32",
        "cpu_count": os.cpu_count(),
        "variants": results,
        "trl": trl,
    }
    if trl and trl.get("seconds_per_step"):
        for result in results.values():
            result["speedup_vs_trl"] = trl["seconds_per_step"] / result["seconds_per_step"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print_table(report)
    print(f"written to {out}")


def run_variant(name: str, sync: dict[str, int], steps: int, extra: list[str]) -> dict[str, float | int | str]:
    from mlflow.tracking import MlflowClient

    from backends.schedule import Schedule
    from deployments import load_recipe
    from flows.rft import rft
    from schemas import parse_set_args
    from tracking import tracking_uri

    root = Path(tempfile.mkdtemp(prefix="rft-bench-"))
    config = load_recipe("gsm8k").with_overrides({
        "name": f"bench-{name}",
        "stages": [],  # the GRPO step alone: the recipe's SFT warm-up stage is no part of it
        "checkpoint_root_dir": str(root),
        "cluster.ray_address": "local",
        "buffer.batch_size": 1,
        "algorithm.repeat_times": 8,
        "model.max_response_tokens": 128,
        "buffer.total_steps": steps,
        "buffer.explorer_input.eval_tasksets": [],
        "trainer.save_interval": 0,
        **sync,
        **parse_set_args(extra),
    })
    started = time.perf_counter()
    outcome = rft(config=config)[config.name]
    total_wall = time.perf_counter() - started
    client = MlflowClient(tracking_uri=tracking_uri(config))

    def series(key: str) -> list[float]:
        return [m.value for m in sorted(client.get_metric_history(outcome["mlflow_run_id"], key), key=lambda m: m.step)]

    def mean(key: str) -> float:
        values = series(key)[1:] or series(key)
        return statistics.mean(values) if values else 0.0

    wall = series("time/step_wall_s")
    staleness, tok_s = mean("train/staleness_mean"), mean("explore/rollout_tokens_per_s")
    step_s = statistics.mean(wall[1:] or wall)
    samples = mean("explore/experiences")
    trained = samples - mean("train/skipped_zero_advantage")
    schedule = Schedule.of(config)
    result = {
        "sync_offset": schedule.offset,
        "sync_interval": schedule.interval,
        "steps_measured": len(wall[1:] or wall),
        "seconds_per_step": step_s,
        "seconds_per_step_median": statistics.median(wall[1:] or wall),
        "explore_s_median": statistics.median(series("time/explore_s")[1:] or series("time/explore_s") or [0.0]),
        "step_walls_s": wall,
        "explore_s": mean("time/explore_s"),
        "train_s": mean("time/train_s"),
        "sync_s": mean("time/sync_s") or mean("sync/load_s") + mean("sync/export_s"),
        "samples_per_s": samples / step_s,
        "trained_samples_per_step": trained,
        "trained_samples_per_s": trained / step_s,
        "staleness_mean": staleness,
        "rollout_tokens_per_s": tok_s,
        "first_step_s": wall[0],
        "run_wall_s_including_startup": total_wall,
    }
    shutil.rmtree(root, ignore_errors=True)  # the run's checkpoints, exports and MLflow store: ~2 GB a variant
    return result


def run_trl(steps: int) -> dict:
    script = Path(__file__).with_name("trl_grpo.py")
    env = dict(os.environ)
    if os.environ.get("RFT_TRL_SITE"):  # TRL lives outside .venv (see scripts/bench.sh)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ["RFT_TRL_SITE"], env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(script), "--steps", str(steps)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, env=env)
    if proc.returncode != 0:
        reason = "TRL is not installed (run scripts/bench.sh)" if "No module named 'trl'" in proc.stderr else proc.stderr[-2000:]
        print(f"TRL's GRPOTrainer was not measured: {reason}", file=sys.stderr)
        return {"error": reason}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_table(report: dict) -> None:
    trl = report.get("trl") or {}
    print(f"\n{report['shape']}, {report['cpu_count']} cores")
    print(f"{'variant':<20}{'s/step':>8}{'explore':>9}{'train':>7}{'sync':>7}{'trained/s':>11}{'stale':>7}{'vs TRL':>8}")
    for name, r in report["variants"].items():
        ratio = f"{r['speedup_vs_trl']:.2f}x" if "speedup_vs_trl" in r else "-"
        print(f"{name:<20}{r['seconds_per_step']:>8.2f}{r['explore_s']:>9.2f}{r['train_s']:>7.2f}{r['sync_s']:>7.2f}"
              f"{r['trained_samples_per_s']:>11.3f}{r['staleness_mean']:>7.2f}{ratio:>8}")
    if trl.get("seconds_per_step"):
        print(f"{'TRL GRPOTrainer':<20}{trl['seconds_per_step']:>8.2f}")


if __name__ == "__main__":
    main()
