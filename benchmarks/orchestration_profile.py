"""Where the driver's time goes in a GRPO step taken in turns: py-spy samples the flow's process while
benchmarks/grpo_step.py runs our side at one shape, and each sample of the main thread inside `take_turns` is
put in the first part of RULES its stack matches. The Ray timeline (benchmarks/step_profile.py) says how much
of a step no engine or trainer call covers; this says what the driver did then.

    python benchmarks/orchestration_profile.py                      # 1x128, 8 measured steps, ~5 minutes
    python benchmarks/orchestration_profile.py --raw /tmp/prof.txt  # analyse an earlier py-spy record

Writes benchmarks/measured/orchestration_profile.json whole (--out elsewhere).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATE = 50  # py-spy samples per second
PROJECT = re.compile(r"\((flows|tasks|backends|buffer|tracking|checkpointing|schemas|algorithms|workflows|preflight)/")
# (part, pattern of a frame in the stack); the first that matches names the sample. Engine and trainer calls
# first: what runs under them is theirs, whoever called them.
RULES: list[tuple[str, str]] = [
    ("sampling (engine calls, rollouts, rewards)", r"^WorkflowRunner\.run "),
    ("training (the trainer's call)", r"^TrainerClient\.train_step "),
    ("sync (publish and load weights)", r"^(TrainerClient\.publish_weights|WeightTransport\.|LocalPolicy\.load) "),
    ("checkpoint", r"^TrainerClient\.save_checkpoint "),
    ("evaluation", r"^evaluate_and_log "),
    ("reading the taskset", r"^load_taskset "),
    ("tracking (MLflow, progress)", r"\((tracking)/"),
    ("CPU and cluster accounting (Ray calls)",
     r"^(EngineClient\.cpu_seconds|TrainerClient\.cpu_seconds|alive_nodes|cluster_gpus|get_actor) "),
]
PREFECT_FLOW = "Prefect's subflow runs (API calls to its server, parameters)"
PREFECT_TASK = "Prefect's task runs"
OTHER = "other driver code"


COMPILED = [(part, re.compile(pattern)) for part, pattern in RULES]


def part_of(frames: list[str]) -> str:
    for part, pattern in COMPILED:
        if any(pattern.search(f) for f in frames):
            return part
    # otherwise: what ran under the deepest of our frames (Prefect's own work when that called a flow or task)
    deepest = max((i for i, f in enumerate(frames) if PROJECT.search(f) or f.startswith("take_turns ")), default=0)
    under = frames[deepest + 1:]
    if any(f.startswith("Flow.__call__") for f in under):
        return PREFECT_FLOW
    if any(f.startswith(("Task.__call__", "Task.with_options")) for f in under):
        return PREFECT_TASK
    return OTHER


def analyse(raw: Path, steps: int) -> dict:
    """Seconds per step of each part, from a py-spy raw record (one line per stack: frames;… count)."""
    seconds: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        turns = next((i for i, f in enumerate(frames) if f.startswith("take_turns ")), None)
        if turns is None:
            continue
        seconds[part_of(frames[turns:])] += int(count) / RATE
    total = sum(seconds.values())
    return {
        "steps": steps, "driver_s_per_step": round(total / steps, 3),
        "parts_s_per_step": {part: round(s / steps, 3) for part, s in seconds.most_common()},
        "parts_share": {part: round(s / total, 4) for part, s in seconds.most_common()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="1x128")
    parser.add_argument("--steps", type=int, default=8, help="measured steps, after one warm-up step")
    parser.add_argument("--raw", type=Path, help="analyse this py-spy raw record instead of running")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/measured/orchestration_profile.json")
    args = parser.parse_args()
    bench: dict = {}
    if args.raw is None:
        if shutil.which("py-spy") is None:
            sys.exit("orchestration_profile: py-spy is not installed (pip install py-spy)")
        work = Path(tempfile.mkdtemp(prefix="orch-"))
        args.raw, bench_json = work / "pyspy.txt", work / "grpo_step.json"
        started = time.time()
        subprocess.run(["py-spy", "record", "--idle", "--rate", str(RATE), "--format", "raw", "-o", str(args.raw), "--",
                        sys.executable, str(ROOT / "benchmarks/grpo_step.py"), "--shapes", args.shape, "--variants",
                        "offset0-interval1", "--no-trl", "--steps", str(args.steps), "--out", str(bench_json)],
                       check=True, cwd=ROOT)
        side = json.loads(bench_json.read_text())["shapes"][0]["sides"]["offset0-interval1"]
        bench = {"shape": args.shape, "seconds_per_step": side["seconds_per_step"],
                 "ray_timeline_shares": side.get("profile", {}).get("shares"), "wall_s": round(time.time() - started, 1)}
    result = {"what": "the flow process's main thread inside take_turns (flows/rl.py), sampled by py-spy at "
                      f"{RATE} Hz; seconds per step (the warm-up step included) of each part, first rule that matches",
              "rules": [part for part, _ in RULES] + [PREFECT_FLOW, PREFECT_TASK, OTHER],
              "date": time.strftime("%Y-%m-%d"), **bench, **analyse(args.raw, args.steps + 1)}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
