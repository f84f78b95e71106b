"""How much of the pass@k − pass@1 gap an RL stage closes, from `rft eval --repeat k` outputs, written whole as JSON.

Each model is evaluated with the same k, temperature and split; mean@k is the expected pass@1 at that temperature.
The gap a stage closes is (mean@k after − mean@k before) / (pass@k before − mean@k before): 1 means its model's
single sample is now as good as the best of k of its start. Run from the repository root:

    .venv/bin/python scripts/passk_gap.py docs/runs-data/<date>_<name>_passk.json \\
        --what "..." --taskset gsm8k-eval --pair warmup.json:grpo.json [--pair ...] [--extra other.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any


def summary(path: Path, taskset: str) -> dict[str, Any]:
    """One `rft eval` output: its model, settings and the k-sample metrics."""
    data = json.loads(path.read_text())
    if taskset not in data.get("eval", {}):
        raise SystemExit(f"{path}: no taskset {taskset!r} in its eval (it has {sorted(data.get('eval', {}))})")
    metrics, settings = data["eval"][taskset], data["tasksets"][taskset]
    k = int(settings["repeat_times"])
    model = data["model"].removeprefix(f"{Path.cwd()}/")  # the repository-relative folder where it is one
    return {"file": path.name, "model": model, "split": settings["split"], "k": k,
            "temperature": settings["rollout_args"]["temperature"], "minutes": data.get("minutes"),
            f"mean@{k}": metrics[f"mean@{k}"], f"pass@{k}": metrics[f"pass@{k}"],
            "format": metrics["format"], "truncated": metrics["truncated"],
            "response_length": metrics["response_length"]}


def gap_closed(before: dict[str, Any], after: dict[str, Any]) -> float | None:
    """Share of before's pass@k − mean@k gap that after's mean@k closes (None without a gap); evaluations that
    differ in split, k or temperature are refused."""
    same = ("split", "k", "temperature")
    if any(before[key] != after[key] for key in same):
        raise SystemExit(f"{before['file']} and {after['file']} differ in {[k for k in same if before[k] != after[k]]}")
    k = before["k"]
    gap = before[f"pass@{k}"] - before[f"mean@{k}"]
    return round((after[f"mean@{k}"] - before[f"mean@{k}"]) / gap, 3) if gap > 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--what", required=True, help="one line: which runs and models, and why")
    parser.add_argument("--taskset", default="gsm8k-eval")
    parser.add_argument("--pair", action="append", default=[], help="BEFORE.json:AFTER.json (a stage's start, its end)")
    parser.add_argument("--extra", action="append", default=[], help="an evaluation to list without a pair")
    parser.add_argument("--machine", help="the machine_speed JSON of the machine that ran them")
    args = parser.parse_args()
    pairs = []
    for pair in args.pair:
        before, _, after = pair.partition(":")
        b, a = summary(Path(before), args.taskset), summary(Path(after), args.taskset)
        pairs.append({"before": b, "after": a, "gap_closed": gap_closed(b, a)})
    out = {"what": args.what, "date": datetime.date.today().isoformat(), "machine": args.machine,
           "taskset": args.taskset, "pairs": pairs, "extra": [summary(Path(p), args.taskset) for p in args.extra]}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
