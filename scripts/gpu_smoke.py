"""The smoke recipe on this machine's GPUs, each way the weights can reach the engines (scripts/gpu-smoke.sh).

For a GPU machine after `scripts/setup.sh --gpu`: a private Ray cluster of its GPUs, one vLLM engine on one GPU
and the trainer on the others. Each check is one `rft run smoke` (two GRPO steps): rc, seconds and the eval
reward before → after, one line each, and a JSON written whole at the end.

- `torch/checkpoint`: the torch trainer, weights through safetensors on disk;
- `torch/nccl`: the torch trainer pushing its tensors into the engine over NCCL;
- `verl/nccl`: veRL's workers (every GPU the engine left), NCCL.

`memory` (CUDA IPC) needs the engine on the trainer's GPU, which mode `both` does not do yet (docs/gpu.md).
`--dry-run` validates each check's config for `--gpus` GPUs and runs nothing: what the test suite runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHECKS: dict[str, dict[str, str]] = {
    "torch/checkpoint": {"synchronizer.sync_method": "checkpoint"},
    "torch/nccl": {"synchronizer.sync_method": "nccl"},
    "verl/nccl": {"trainer.trainer_type": "verl", "synchronizer.sync_method": "nccl"},
}
RUN_TIMEOUT_S = 480  # the three within 8 minutes on one GPU node: a check past this has failed


def settings(check: str, gpus: int, root: Path) -> dict[str, str]:
    return {"name": f"gpu-smoke-{check.replace('/', '-')}", "checkpoint_root_dir": str(root),
            "cluster.ray_address": "local", "cluster.node_num": "1", "cluster.gpu_per_node": str(gpus), **CHECKS[check]}


def _args(values: dict[str, str]) -> list[str]:
    return [a for key, value in values.items() for a in ("--set", f"{key}={value}")]


def reward_change(root: Path, name: str) -> tuple[float | None, float | None]:
    """The eval reward_mean before and after, from the last stage's summary.json."""
    summaries = sorted((p for p in root.rglob("summary.json") if name in str(p)), key=lambda p: p.stat().st_mtime)
    if not summaries:
        return None, None
    summary = json.loads(summaries[-1].read_text())

    def mean(section: str) -> float | None:
        values = [m.get("reward_mean") for m in (summary.get(section) or {}).values() if isinstance(m, dict)]
        return values[0] if values else None

    return mean("eval_at_start"), mean("eval")


def run_check(check: str, gpus: int, root: Path, dry_run: bool) -> dict[str, Any]:
    values = settings(check, gpus, root)
    command = [sys.executable, "-m", "cli.main", "validate" if dry_run else "run", "smoke", *_args(values)]
    started = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-3000:]
    except subprocess.TimeoutExpired:
        rc, tail = 124, f"did not end within {RUN_TIMEOUT_S} s"
    result: dict[str, Any] = {"check": check, "rc": rc, "seconds": round(time.monotonic() - started, 1),
                              "command": " ".join(command[2:])}
    if not dry_run:
        result["reward_before"], result["reward_after"] = reward_change(root, values["name"])
    if rc != 0:
        result["output_tail"] = tail
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=None, help="GPUs of this machine (default: torch's count)")
    parser.add_argument("--dry-run", action="store_true", help="validate each check's config; run nothing")
    parser.add_argument("--root", type=Path, default=None, help="checkpoint root (default: a temporary folder)")
    parser.add_argument("--out", type=Path, required=True, help="where the JSON report goes")
    args = parser.parse_args()
    gpus = args.gpus
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count()
    if gpus < 2 and not args.dry_run:
        print(f"gpu-smoke: {gpus} GPU(s) here; mode 'both' needs 2 (one for the engine, one for the trainer)",
              file=sys.stderr)
        return 2
    root = args.root or Path(tempfile.mkdtemp(prefix="gpu-smoke-"))
    results = []
    for check in CHECKS:
        result = run_check(check, gpus, root, args.dry_run)
        results.append(result)
        change = "" if args.dry_run else f"  reward {result['reward_before']} -> {result['reward_after']}"
        print(f"{'ok  ' if result['rc'] == 0 else 'FAIL'} {check:<18} rc {result['rc']:<4} {result['seconds']:7.1f} s{change}",
              flush=True)
    failed = sum(r["rc"] != 0 for r in results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"gpus": gpus, "dry_run": args.dry_run, "checks": results}, indent=1) + "\n")
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
