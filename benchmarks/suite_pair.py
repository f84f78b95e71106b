"""The default test run before and after a change, like for like: the tests both trees hold (the same
node ids), each tree's own code and order, one tree after the other on this machine; the totals and the
time per test file written whole as JSON.

    .venv/bin/python benchmarks/suite_pair.py --before ../old-tree --after . --out benchmarks/measured/X.json
    .venv/bin/python benchmarks/suite_pair.py --junit B.xml A.xml --commits B A --out X.json  # a past pair's files

A tree is a checkout (e.g. `git worktree add ../old-tree <commit>`) run with this project's .venv; its own
modules come first on PYTHONPATH, so Ray's and Prefect's processes import that tree's code too.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

PYTHON = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "python"


def _pytest(tree: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=tree, env=env, capture_output=True, text=True)


def collect(tree: Path, *args: str) -> set[str]:
    """The test ids pytest collects in `tree` with `args` (with none: the default run's)."""
    return {line for line in _pytest(tree, "--collect-only", *args).stdout.splitlines() if "::" in line}


def run(tree: Path, deselect: set[str], junit: Path) -> dict:
    """Runs the tree's default tests less `deselect`; returns its wall seconds and pytest's last line."""
    args = [a for test in sorted(deselect) for a in ("--deselect", test)]
    start = time.monotonic()
    done = _pytest(tree, f"--junitxml={junit}", *args)
    lines = done.stdout.strip().splitlines()
    return {"wall_s": round(time.monotonic() - start, 1), "returncode": done.returncode,
            "summary": lines[-1] if lines else ""}


def node_id(case: ET.Element) -> str:
    """A junit testcase's pytest id: classname tests.test_x or tests.test_x.TestClass, then the name."""
    parts = case.get("classname", "").split(".")
    classes: list[str] = []
    while len(parts) > 1 and not parts[-1].startswith("test_"):
        classes.insert(0, parts.pop())
    return "::".join(["/".join(parts) + ".py", *classes, case.get("name", "")])


def per_file(junit: Path) -> dict[str, dict]:
    """Seconds (setup, call and teardown) and tests of each test file, from a junit file."""
    seconds: dict[str, float] = collections.defaultdict(float)
    tests: collections.Counter = collections.Counter()
    for case in ET.parse(junit).iter("testcase"):
        file = node_id(case).split("::", 1)[0]
        seconds[file] += float(case.get("time", 0))
        tests[file] += 1
    return {f: {"seconds": round(seconds[f], 1), "tests": tests[f]} for f in sorted(seconds)}


WHAT = "the default tests both trees hold, each tree's code, one after the other"


def summarise(before: Path, after: Path, runs: dict | None = None, what: str = WHAT) -> dict:
    files = {"before": per_file(before), "after": per_file(after)}
    total = {side: round(sum(v["seconds"] for v in by_file.values()), 1) for side, by_file in files.items()}
    return {
        "what": what,
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "runs": runs or {},
        "tests": {side: sum(v["tests"] for v in by_file.values()) for side, by_file in files.items()},
        "seconds_in_tests": total,
        "after_over_before": round(total["after"] / total["before"], 3) if total["before"] else None,
        "files": {f: {side: files[side].get(f) for side in files} for f in sorted(set(files["before"]) | set(files["after"]))},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path)
    parser.add_argument("--after", type=Path)
    parser.add_argument("--junit", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--commits", nargs=2, metavar=("BEFORE", "AFTER"), help="with --junit: the trees' commits")
    parser.add_argument("--what", default=WHAT, help="with --junit: what the two files hold")
    parser.add_argument("--out", type=Path, required=True)
    a = parser.parse_args()
    if a.junit:
        result = summarise(*a.junit, {side: {"commit": c} for side, c in zip(("before", "after"), a.commits or ())}, a.what)
    elif a.before and a.after:
        trees = {"before": a.before.resolve(), "after": a.after.resolve()}
        ids = {side: collect(tree) for side, tree in trees.items()}
        common = ids["before"] & ids["after"]
        junits = {side: a.out.with_suffix(f".{side}.xml") for side in trees}
        runs = {side: {"tree": str(tree), "commit": _commit(tree), "tests_run": len(common),
                       **run(tree, ids[side] - common, junits[side])} for side, tree in trees.items()}
        result = summarise(junits["before"], junits["after"], runs)
    else:
        parser.error("give --before and --after, or --junit BEFORE AFTER")
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{a.out}: {result['seconds_in_tests']} s in tests, after/before {result['after_over_before']}")
    return 0


def _commit(tree: Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
