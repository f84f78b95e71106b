"""Dynamic sampling in whole runs (the `hello` recipe on the torch trainer, or veRL, and vLLM CPU, or on the local
Tinker server; 8-token answers): all-equal groups are dropped and the step is filled from more taskset batches, in turns and overlapped; a
run killed in the middle of a step and run again trains every experience once and loses none. The taskset
and the check are in tests/dynamic_sampling_layout.py; the Tinker case is in tests/test_tinker.py (its server).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from deployments import load_recipe
from tests.dynamic_sampling_layout import check_the_record, expected, overrides
from tracking import tracking_uri

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.full  # CI's 90 minutes: scripts/test.sh --full (docs/testing.md, 2026-11-29)
@pytest.mark.parametrize("trainer_type", ["torch", "verl"])
def test_a_run_in_turns_drops_all_equal_groups_and_fills_every_step(tmp_path: Path, trainer_type: str,
                                                                   tiny_model_path: str) -> None:
    """The explore side does it all, so every trainer backend gets it. On the tiny model (tests/tiny_model.py): its
    random answers differ from each other, so an informative row's four similarities differ as SmolLM2's do."""
    from flows.rft import rft

    config = load_recipe("hello").with_overrides(overrides(tmp_path, f"ds-{trainer_type}") | {
        "trainer.trainer_type": trainer_type, "model.model_path": tiny_model_path})
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 3
    assert check_the_record(config) == expected()
    client = MlflowClient(tracking_uri=tracking_uri(config))

    def history(metric: str) -> dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(outcome["mlflow_run_id"], metric)}

    assert history("explore/dynamic_sampling_rounds") == {1: 2.0, 2: 3.0, 3: 1.0}
    assert history("explore/dynamic_sampling_groups_kept") == {1: 2.0, 2: 2.0, 3: 2.0}
    assert history("explore/dynamic_sampling_groups_dropped") == {1: 2.0, 2: 3.0, 3: 0.0}  # all-equal ones
    assert history("explore/dynamic_sampling_dropped_share") == {1: 0.5, 2: 4 / 6, 3: 0.0}


@pytest.mark.full  # CI's 90 minutes: scripts/test.sh --full (docs/testing.md, 2026-11-29)
def test_a_run_killed_mid_step_and_run_again_trains_each_experience_once(tmp_path: Path, tiny_model_path: str) -> None:
    """Overlapped (the explorer a step ahead): SIGKILL the whole run while explore step 2 samples its second
    batch, then `rft run` the same experiment again. On the tiny model, as the runs above."""
    changed = {"synchronizer.sync_offset": 1, "model.model_path": tiny_model_path}
    settings = [f"{k}={json.dumps(v)}" for k, v in (overrides(tmp_path, "ds-killed") | changed).items()]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}

    def run(attempt: str) -> tuple[subprocess.Popen, Path]:
        (home := tmp_path / f"prefect-{attempt}").mkdir()
        log = tmp_path / f"{attempt}.log"
        cmd = [sys.executable, "-m", "cli.main", "run", "hello", *(a for s in settings for a in ("--set", s))]
        return subprocess.Popen(cmd, cwd=ROOT, env=env | {"PREFECT_HOME": str(home)}, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True), log

    first, log = run("first")
    deadline = time.monotonic() + 420
    while "explore step 2, round 2" not in log.read_text() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert first.poll() is None, f"the run ended before explore step 2's second batch:\n{log.read_text()[-3000:]}"
    assert "explore step 2, round 2" in log.read_text(), log.read_text()[-3000:]
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    again, log = run("again")
    assert again.wait(timeout=540) == 0, log.read_text()[-4000:]
    config = load_recipe("hello").with_overrides(overrides(tmp_path, "ds-killed") | changed)
    assert check_the_record(config) == expected()
