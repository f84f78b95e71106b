"""Where one whole test run's time went, from pytest's junit file: seconds per test file, the default
run's tests against those marked `full` (what CI would add by running `scripts/test.sh --full`), the
slowest tests and the failures; written whole as JSON.

    scripts/test.sh --full --junitxml=run.xml
    .venv/bin/python benchmarks/machine_speed.py --out speed.json   # machines here differ up to 2x
    .venv/bin/python benchmarks/suite_time.py --junit run.xml --commit <sha> --wall-s <seconds> \
        --machine-speed speed.json --out X.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from suite_pair import collect, node_id, per_file  # beside this script

ROOT = Path(__file__).resolve().parents[1]


def full_ids(tree: Path = ROOT) -> set[str]:
    """The node ids of the tests marked `full` in `tree` (collected, not run)."""
    return collect(tree, "-m", "full")


def summarise(junit: Path, full: set[str], commit: str, wall_s: float | None, speed: dict | None = None,
              workers: int = 1) -> dict:
    """`speed`: benchmarks/machine_speed.py's JSON for the machine that ran the tests (its sampling tokens/s);
    `workers`: pytest-xdist workers that ran at once (each test's seconds are its own, so their sum exceeds the wall
    time when there were several)."""
    cases = []
    for case in ET.parse(junit).iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        cases.append({"id": node_id(case), "seconds": float(case.get("time", 0)),
                      "outcome": "failed" if failed else "skipped" if skipped else "passed"})
    split = {side: [c for c in cases if (c["id"] in full) == (side == "full")] for side in ("default", "full")}
    return {
        "what": "one pytest run's time per test file, split into the default run's tests and those marked full",
        "commit": commit, "machine": {"cores": os.cpu_count(), "platform": platform.platform(),
                                      **({"sampling_tokens_per_s": speed["median_tokens_per_s"]} if speed else {})},
        "wall_s": wall_s,
        "workers": workers,
        "seconds_in_tests": round(sum(c["seconds"] for c in cases), 1),
        "by_side": {side: {"tests": len(cs), "seconds": round(sum(c["seconds"] for c in cs), 1),
                           "failed": sum(c["outcome"] == "failed" for c in cs)} for side, cs in split.items()},
        "per_file": per_file(junit),
        "slowest": [{**c, "seconds": round(c["seconds"], 1)} for c in sorted(cases, key=lambda c: -c["seconds"])[:30]],
        "failed": [c["id"] for c in cases if c["outcome"] == "failed"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junit", type=Path, required=True)
    parser.add_argument("--commit", required=True, help="the commit the run tested")
    parser.add_argument("--wall-s", type=float, help="the whole command's wall seconds, setup and lint included")
    parser.add_argument("--machine-speed", type=Path, help="benchmarks/machine_speed.py's JSON for this machine")
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers the run had (scripts/test.sh: 2)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    speed = json.loads(args.machine_speed.read_text()) if args.machine_speed else None
    report = summarise(args.junit, full_ids(), args.commit, args.wall_s, speed, args.workers)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    sides = report["by_side"]
    print(f"default {sides['default']['seconds']:.0f} s, full {sides['full']['seconds']:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
