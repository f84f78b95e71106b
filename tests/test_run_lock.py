"""One live run per experiment directory; a dead process's lock is no obstacle.

(Resuming after a SIGKILL is tested through a real Prefect server and worker in test_deployment.py:
the smoke run is killed in the middle of a step and retried.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from checkpointing.lock import ExperimentBusyError, hold, release

ROOT = Path(__file__).resolve().parent.parent


def test_second_live_run_is_refused_and_a_dead_holder_blocks_nothing(tmp_path: Path) -> None:
    exp_dir = tmp_path / "rft" / "smoke"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import pathlib, sys, time; from checkpointing.lock import hold; "
         f"hold(pathlib.Path({str(exp_dir)!r}), 'first run'); print('held', flush=True); time.sleep(60)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ExperimentBusyError, match="already being run by .*first run"):
            hold(exp_dir, "second run")
    finally:
        holder.kill()  # SIGKILL: the process never releases anything itself
        holder.wait()
    hold(exp_dir, "retry")
    release(exp_dir)
