"""Seconds per GRPO step on SmolLM2-135M-Instruct (CPU), ours and TRL's, at one or more shapes.

A shape is `PxT`: P GSM8K prompts per step, each sampled 8 times, responses of at most T tokens. At each
shape it runs the real `rft` flow (Prefect, Ray, vLLM CPU, torch trainer) per variant — explorer and trainer
taking turns (sync_offset 0) or overlapped (sync_offset 1), syncing every step or every second step — and
reads each step's wall time back from MLflow; then TRL's GRPOTrainer at the same shape in a subprocess
(benchmarks/trl_grpo.py, TRL from $RFT_TRL_SITE, which scripts/bench.sh fills), with transformers' generate,
with transformers' continuous batching, and with vLLM colocated in its process (a configuration that fails is
recorded with its error and not tried again at shapes as large or larger). Every side runs one warm-up step
(one-time costs) and then `--steps` measured steps, and is summarised the same way from its per-step wall times:
median, min and max seconds per step, generated and trained samples per second at the median. The JSON is written whole after every shape
(a temporary file renamed over the old one), with the machine, date and commit; the plot beside it
(benchmarks/report.py) likewise. benchmarks/report.py renders the JSON into docs/speed.md.

    .venv/bin/python benchmarks/grpo_step.py [--steps 8] [--shapes 1x128 4x128 ...] [--variants offset1-interval1 ...]
                                             [--trl transformers-generate ...] [--no-trl]
                                             [--set path=value ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from report import write_plot  # benchmarks/report.py, beside this script
from step_profile import profile

ROOT = Path(__file__).resolve().parent.parent
SAMPLES_PER_PROMPT = 8
VARIANTS: dict[str, dict[str, int]] = {
    "offset0-interval1": {"synchronizer.sync_offset": 0, "synchronizer.sync_interval": 1},
    "offset1-interval1": {"synchronizer.sync_offset": 1, "synchronizer.sync_interval": 1},
    "offset0-interval2": {"synchronizer.sync_offset": 0, "synchronizer.sync_interval": 2},
    "offset1-interval2": {"synchronizer.sync_offset": 1, "synchronizer.sync_interval": 2},
}
# trl_grpo.py's ways to generate: TRL's default, and the two faster ones its docs offer on one device
TRL_CONFIGS = {"transformers-generate": [], "transformers-continuous-batching": ["--continuous-batching"],
               "vllm-colocate": ["--vllm-colocate"]}


def parse_shape(text: str) -> dict[str, int | str]:
    """'4x128' -> 4 prompts per step, responses of at most 128 tokens."""
    prompts, _, tokens = text.lower().partition("x")
    if not (prompts.isdigit() and tokens.isdigit() and int(prompts) > 0 and int(tokens) > 0):
        raise argparse.ArgumentTypeError(f"a shape is PROMPTSxTOKENS, e.g. 4x128; got {text!r}")
    return {"shape": f"{int(prompts)}x{int(tokens)}", "prompts": int(prompts), "max_response_tokens": int(tokens),
            "samples_per_step": int(prompts) * SAMPLES_PER_PROMPT}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="measured steps per side and shape, after one warm-up step")
    parser.add_argument("--shapes", nargs="+", type=parse_shape, default=[parse_shape("1x128")],
                        help="PROMPTSxTOKENS per step, e.g. 1x128 4x128 16x128 1x512")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--trl", nargs="*", default=list(TRL_CONFIGS), choices=list(TRL_CONFIGS), help="TRL configurations")
    parser.add_argument("--no-trl", action="store_true", help="do not run TRL's GRPOTrainer")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="extra dotted.path=value")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "grpo_step.json"))
    args = parser.parse_args()
    if "PREFECT_HOME" not in os.environ:  # a private Prefect database, never the user's
        os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="rft-bench-prefect-")
    # As `rft run` and the tests do (before Prefect is imported): no telemetry, bounded API waits, and time for
    # the temporary server to start on a busy machine (Prefect's 20 s most likely lost a variant's run on 2 cores).
    from cli import defaults

    defaults.apply()
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    out = Path(args.out)
    trl_configs = [] if args.no_trl else args.trl

    report = {
        "schema": "grpo_step/2",
        "machine": machine(),
        "model": "SmolLM2-135M-Instruct float32 (GSM8K train prompts)",
        "samples_per_prompt": SAMPLES_PER_PROMPT,
        "warmup_steps": 1,
        "steps_measured": args.steps,
        "statistic": "median, min and max of the measured steps' wall times; samples per second at the median",
        "variants": {name: VARIANTS[name] for name in args.variants},
        "trl_configs": trl_configs,
        "overrides": args.overrides,
        "shapes": [],
        "complete": False,
    }
    failed_trl: dict[str, dict] = {}  # a TRL configuration that failed is not tried again at a shape as large or larger
    for shape in args.shapes:
        sides = {}
        for name in args.variants:
            sides[name] = progress(shape, name, run_variant(name, VARIANTS[name], shape, args.steps, args.overrides))
        for config in trl_configs:
            failed = failed_trl.get(config)
            if failed and shape["prompts"] >= failed["prompts"] and shape["max_response_tokens"] >= failed["max_response_tokens"]:
                sides[f"trl-{config}"] = {"error": f"not run: failed at shape {failed['shape']} (see there)"}
                continue
            log = out.with_name(f"{out.stem}.logs") / f"trl-{config}-{shape['shape']}.log"
            sides[f"trl-{config}"] = result = progress(shape, f"trl-{config}", run_trl(config, shape, args.steps, log))
            if "error" in result:
                failed_trl[config] = shape
        report["shapes"].append({**shape, **compare(sides)})
        write_whole(out, report)
        write_plot(report, out.with_suffix(".png"))
    report["complete"] = True
    write_whole(out, report)
    print_table(report)
    print(f"written to {out} and {out.with_suffix('.png')}")


def progress(shape: dict, name: str, side: dict) -> dict:
    """One line per side as it ends (stderr), so a long grid shows where it is."""
    done = f"median {side['seconds_per_step']['median']:.2f} s/step" if "seconds_per_step" in side else side.get("error", "")[:300]
    print(f"[{time.strftime('%H:%M:%S')}] {shape['shape']} {name}: {done}", file=sys.stderr, flush=True)
    return side


def machine() -> dict[str, object]:
    def git(*cmd: str) -> str:
        done = subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    cpu_model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "load_average_at_start": os.getloadavg()[0],
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "python": platform.python_version(),
    }


def summarise(walls: list[float], generated_per_step: float, trained_per_step: float) -> dict[str, object]:
    """One side at one shape, from its per-step wall times: the first step is warm-up, the rest are measured."""
    measured = walls[1:]
    if not measured:
        return {"error": f"no measured step (step walls: {walls})", "step_walls_s": walls}
    median = statistics.median(measured)
    return {
        "steps_measured": len(measured),
        "seconds_per_step": {"median": median, "min": min(measured), "max": max(measured)},
        "generated_samples_per_step": generated_per_step,
        "trained_samples_per_step": trained_per_step,
        "generated_samples_per_s": generated_per_step / median,
        "trained_samples_per_s": trained_per_step / median,
        "warmup_step_s": walls[0],
        "step_walls_s": walls,
    }


def compare(sides: dict[str, dict]) -> dict[str, object]:
    """Each of our sides' speed-up over the fastest TRL configuration that ran at this shape (TRL's median over ours)."""
    trl = {name: side for name, side in sides.items() if name.startswith("trl-") and "seconds_per_step" in side}
    reference = min(trl, key=lambda name: trl[name]["seconds_per_step"]["median"]) if trl else None
    for name, side in sides.items():
        if reference and not name.startswith("trl-") and "seconds_per_step" in side:
            side["speedup_vs_trl"] = trl[reference]["seconds_per_step"]["median"] / side["seconds_per_step"]["median"]
    return {"trl_reference": reference, "sides": sides}


def run_variant(name: str, sync: dict[str, int], shape: dict, steps: int, extra: list[str]) -> dict[str, object]:
    from mlflow.tracking import MlflowClient

    from backends.schedule import Schedule
    from deployments import load_recipe
    from flows.rft import rft
    from schemas import parse_set_args
    from tracking import tracking_uri

    root = Path(tempfile.mkdtemp(prefix="rft-bench-"))
    config = load_recipe("gsm8k").with_overrides({
        "name": f"bench-{name}-{shape['shape']}",
        "stages": [],  # the GRPO step alone: the recipe's SFT warm-up stage is no part of it
        "checkpoint_root_dir": str(root),
        "cluster.ray_address": "local",
        "buffer.batch_size": shape["prompts"],
        "algorithm.repeat_times": SAMPLES_PER_PROMPT,
        "model.max_response_tokens": shape["max_response_tokens"],
        "buffer.total_steps": steps + 1,
        "buffer.explorer_input.eval_tasksets": [],
        "trainer.save_interval": 0,
        "monitor.enable_ray_timeline": True,  # where each step's time goes (benchmarks/step_profile.py)
        **sync,
        **parse_set_args(extra),
    })
    started = time.perf_counter()
    try:
        outcome = rft(config=config)[config.name]
    except Exception as error:  # one side failing (memory at a large shape) leaves the rest of the grid to run
        shutil.rmtree(root, ignore_errors=True)
        return {"error": f"{type(error).__name__}: {error}"[:2000], "traceback_tail": traceback.format_exc()[-3000:]}
    total_wall = time.perf_counter() - started
    client = MlflowClient(tracking_uri=tracking_uri(config))

    def measured(key: str) -> list[float]:  # the measured steps' values, in step order (the warm-up dropped)
        return [m.value for m in sorted(client.get_metric_history(outcome["mlflow_run_id"], key), key=lambda m: m.step)][1:]

    def mean(key: str) -> float:
        values = measured(key)
        return statistics.mean(values) if values else 0.0

    step_walls = sorted(client.get_metric_history(outcome["mlflow_run_id"], "time/step_wall_s"), key=lambda m: m.step)
    walls = [m.value for m in step_walls]
    generated = mean("explore/experiences")
    schedule = Schedule.of(config)
    result = {
        "sync_offset": schedule.offset,
        "sync_interval": schedule.interval,
        **summarise(walls, generated, generated - mean("train/skipped_zero_advantage")),
        "explore_s_median": statistics.median(measured("time/explore_s") or [0.0]),
        "train_s_median": statistics.median(measured("time/train_s") or [0.0]),
        "sync_s_mean": mean("time/sync_s") or mean("sync/load_s") + mean("sync/export_s"),
        "staleness_mean": mean("train/staleness_mean"),
        "rollout_tokens_per_s_mean": mean("explore/rollout_tokens_per_s"),
        "run_wall_s_including_startup": total_wall,
        "profile": step_profile(config.experiment_dir, [m.timestamp / 1000 for m in step_walls]),  # logged as each step ends
    }
    shutil.rmtree(root, ignore_errors=True)  # the run's checkpoints, exports and MLflow store: ~2 GB a variant
    return result


def step_profile(experiment: Path, step_ends: list[float]) -> dict[str, object]:
    """Sampling, training, sync, checkpoint and orchestration as shares of the measured steps, from the
    run's Ray timeline (the first step's end opens the window)."""
    from checkpointing import layout
    from tasks.setup import RAY_TIMELINE

    timeline = layout.log_dir(experiment) / RAY_TIMELINE
    if not timeline.is_file():
        return {"error": f"no Ray timeline at {timeline}"}
    return profile(json.loads(timeline.read_text()), step_ends)


def run_trl(config: str, shape: dict, steps: int, log: Path) -> dict[str, object]:
    """trl_grpo.py in a subprocess: its JSON line from stdout; its stderr (progress, tracebacks) to `log`, which
    a run cut short keeps."""
    env = dict(os.environ)
    if os.environ.get("RFT_TRL_SITE"):  # TRL lives outside .venv (see scripts/bench.sh)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ["RFT_TRL_SITE"], str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, str(Path(__file__).with_name("trl_grpo.py")), "--steps", str(steps),
               "--prompts", str(shape["prompts"]), "--max-tokens", str(shape["max_response_tokens"]), *TRL_CONFIGS[config]]
    started = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as stderr:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT, env=env)
    errors = log.read_text()
    total_wall = time.perf_counter() - started
    lines = proc.stdout.strip().splitlines()
    try:
        printed = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        printed = {}
    if "step_walls_s" in printed and proc.returncode == 0:
        walls = printed.pop("step_walls_s")
        summary = summarise(walls, printed.pop("samples_per_step"), printed.pop("trained_samples_per_step"))
        return {**printed, **summary, "run_wall_s_including_startup": total_wall}
    reason = printed.get("error") or f"exit status {proc.returncode}: {errors.strip()[-2000:]}"
    if "No module named 'trl'" in reason:
        reason = "TRL is not installed (run scripts/bench.sh)"
    return {**printed, "config": config, "error": reason}


def write_whole(path: Path, report: dict) -> None:
    """A reader (or a run cut short) finds the previous whole file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(path)


def print_table(report: dict) -> None:
    m = report["machine"]
    print(f"\n{report['model']}, {m['cpu_count']} cores, {m['date_utc']}, {m['git_commit'][:10]}")
    print(f"{'shape':<8}{'side':<32}{'median s':>9}{'min':>8}{'max':>8}{'gen/s':>8}{'trained/s':>10}{'vs TRL':>8}")
    for shape in report["shapes"]:
        for name, side in shape["sides"].items():
            if "seconds_per_step" not in side:
                print(f"{shape['shape']:<8}{name:<32}  {side.get('error', '')[:80]}")
                continue
            s = side["seconds_per_step"]
            ratio = f"{side['speedup_vs_trl']:.2f}x" if "speedup_vs_trl" in side else "-"
            print(f"{shape['shape']:<8}{name:<32}{s['median']:>9.2f}{s['min']:>8.2f}{s['max']:>8.2f}"
                  f"{side['generated_samples_per_s']:>8.2f}{side['trained_samples_per_s']:>10.2f}{ratio:>8}")


if __name__ == "__main__":
    main()
